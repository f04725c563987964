#include "core/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace glimpse {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      interactive_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && interactive_) std::fputc('\n', stderr);
}

void ProgressBar::Update(int64_t done) {
  done_ = std::clamp<int64_t>(done, 0, total_);
  const auto now = std::chrono::steady_clock::now();
  if (interactive_ && now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    Draw(false);
  }
}

void ProgressBar::Done() {
  if (finished_) return;
  done_ = total_;
  Draw(true);
  finished_ = true;
}

void ProgressBar::Draw(bool final) {
  constexpr int kWidth = 30;
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!interactive_) {
    if (final) std::fprintf(stderr, "%s: done in %.2fs\n", label_.c_str(), secs);
    return;
  }
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %3d%% %.1fs%s", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), secs, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace glimpse

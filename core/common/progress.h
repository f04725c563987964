// A terminal progress bar for long work (model fetch, load, benchmarks). Draws on stderr only when
// stderr is a terminal, so logs and CI output stay clean; otherwise it prints nothing until Done().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace glimpse {

class ProgressBar {
 public:
  // `total` is the number of units of work (bytes, tensors, tokens); `label` names the work.
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Records that `done` units are complete; redraws at most ~10 times a second.
  void Update(int64_t done);
  // Draws the finished bar (or one summary line when not on a terminal).
  void Done();

 private:
  void Draw(bool final);

  const std::string label_;
  const int64_t total_;
  const bool interactive_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t done_ = 0;
  bool finished_ = false;
};

}  // namespace glimpse

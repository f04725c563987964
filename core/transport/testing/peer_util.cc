#include "core/transport/testing/peer_util.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace glimpse::transport::testing {

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string FromHex(std::string_view hex) {
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(nib(hex[i]) << 4 | nib(hex[i + 1]));
  return out;
}

static uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void FillPattern(std::span<uint8_t> out, uint64_t seed, uint64_t batch, uint64_t index) {
  uint64_t base = Mix(seed ^ Mix(batch * 1315423911u + index));
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    uint64_t v = base + i * 0x9E3779B97F4A7C15ull;
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<uint8_t>(base >> (8 * (i % 8))) ^ uint8_t(i);
}

bool CheckPattern(std::span<const uint8_t> in, uint64_t seed, uint64_t batch, uint64_t index) {
  std::vector<uint8_t> want(in.size());
  FillPattern(want, seed, batch, index);
  return std::memcmp(want.data(), in.data(), in.size()) == 0;
}

size_t MixedSize(size_t index) {
  static constexpr size_t kSizes[] = {1, 7, 4096, 65537, 1 << 20, (4 << 20) - 3, 4 << 20, 333};
  return kSizes[index % (sizeof(kSizes) / sizeof(kSizes[0]))];
}

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  return Child(pid, fds[0]);
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_), out_fd_(o.out_fd_), buffered_(std::move(o.buffered_)) {
  o.pid_ = -1;
  o.out_fd_ = -1;
}

Child::~Child() {
  Kill();
  if (out_fd_ >= 0) close(out_fd_);
}

void Child::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

absl::StatusOr<std::string> Child::ReadLine(absl::Time deadline,
                                            const std::vector<std::string>& prefixes) {
  for (;;) {
    size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      for (const auto& p : prefixes) {
        if (line.starts_with(p)) return line;
      }
      continue;
    }
    int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0) return absl::DeadlineExceededError("child printed no line in time");
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) continue;
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return absl::UnavailableError("child closed its stdout");
    buffered_.append(buf, n);
  }
}

absl::StatusOr<int> Child::WaitExit(absl::Time deadline) {
  while (pid_ > 0) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("child did not exit in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return absl::FailedPreconditionError("child already reaped");
}

}  // namespace glimpse::transport::testing

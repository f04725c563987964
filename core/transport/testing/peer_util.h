// Test/bench support for the UCX transport: hex encoding of addresses for argv, deterministic
// buffer contents, and a child process runner (fork + exec, bounded waits, no leftovers).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glimpse::transport::testing {

std::string ToHex(std::string_view bytes);
std::string FromHex(std::string_view hex);

// Fills `out` with bytes that depend on (seed, batch, index) and the position.
void FillPattern(std::span<uint8_t> out, uint64_t seed, uint64_t batch, uint64_t index);
bool CheckPattern(std::span<const uint8_t> in, uint64_t seed, uint64_t batch, uint64_t index);

// Size of buffer `index` for the "mixed" size spec 0: cycles 1 B .. 4 MiB.
size_t MixedSize(size_t index);

// A child process started from `argv` (argv[0] is the program path). Its stdout is readable
// line by line; the destructor SIGKILLs and reaps it if it is still running.
class Child {
 public:
  static absl::StatusOr<Child> Start(const std::vector<std::string>& argv);
  Child(Child&& o) noexcept;
  Child& operator=(Child&&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // Next stdout line starting with one of `prefixes` (UCX logs to stdout too; others skipped).
  absl::StatusOr<std::string> ReadLine(absl::Time deadline,
                                       const std::vector<std::string>& prefixes);
  // Exit code (128 + signal if killed) once it exits; DeadlineExceeded if it does not in time.
  absl::StatusOr<int> WaitExit(absl::Time deadline);
  void Kill();

 private:
  Child(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffered_;
};

}  // namespace glimpse::transport::testing

// What the benchmarks share: flag parsing, main() and medians. Flags travel as std::string:
// Debian's abseil has its own string_view type.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace glimpse::bench {

// `value` as an integer >= 1; InvalidArgument naming `flag` otherwise.
inline absl::StatusOr<int> ParsePositive(const std::string& flag, const std::string& value) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " wants a positive integer, got '", value, "'"));
  }
  return v;
}

// When `arg` is --<name>=<value>: sets `*value` and returns true (benchmarks that read their
// flags one name at a time).
inline bool FlagValue(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

// Walks `--flag value` pairs, handing each to `take`: --help or -h gives Cancelled with `usage`, a
// flag without a value InvalidArgument; the first error of `take` ends the walk.
inline absl::Status ForEachFlag(
    int argc, char** argv, const char* usage,
    const std::function<absl::Status(const std::string& flag, const std::string& value)>& take) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return absl::CancelledError(usage);
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const absl::Status status = take(flag, argv[++i]);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// What `take` returns for a flag it does not know.
inline absl::Status UnknownFlag(const std::string& flag, const char* usage) {
  return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'\n", usage));
}

// The median of `v` (not empty).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A benchmark's main(): `parse` returns Cancelled with the usage for --help (printed on stdout,
// exit 0) or another error (stderr, exit 2); then `run`, whose error goes to stderr (exit 1).
// Messages start with the benchmark's `name`.
template <typename Options>
int BenchMain(const char* name, int argc, char** argv,
              absl::StatusOr<Options> (*parse)(int, char**), absl::Status (*run)(const Options&)) {
  absl::StatusOr<Options> options = parse(argc, argv);
  if (!options.ok()) {
    const bool help = absl::IsCancelled(options.status());
    std::fprintf(help ? stdout : stderr, "%s%s%s%s", help ? "" : name, help ? "" : ": ",
                 std::string(options.status().message()).c_str(), help ? "" : "\n");
    return help ? 0 : 2;
  }
  if (absl::Status s = run(*options); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace glimpse::bench

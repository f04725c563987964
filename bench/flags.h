// Flag parsing the benchmarks share. Flags travel as std::string: Debian's abseil has its own
// string_view type.
#pragma once

#include <string>

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

}  // namespace glimpse::bench

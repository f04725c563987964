// A small command-line parser for the glimpse CLI: `--name value`, `--name=value` and boolean
// `--name` flags, declared up front so unknown flags and malformed values are clear errors.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::cli {

struct FlagSpec {
  std::string name;  // without dashes
  std::string help;
  bool is_bool = false;
  std::string default_value;  // shown in --help
};

class Args {
 public:
  // Parses argv[first..argc). InvalidArgument naming the flag for unknown flags, missing values
  // and stray positional arguments.
  static absl::StatusOr<Args> Parse(const std::vector<FlagSpec>& specs, int argc, char** argv,
                                    int first);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string GetString(const std::string& name, const std::string& fallback = "") const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

// "Usage" text: one line per flag with its help and default.
std::string FlagHelp(const std::vector<FlagSpec>& specs);

}  // namespace glimpse::cli

// A small command-line parser for the glimpse CLI: `--name value`, `--name=value` and boolean
// `--name` flags, declared up front so unknown flags and malformed values are clear errors.
#pragma once

#include <cstdio>
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

// Prints "glimpse <command>: <message>" to stderr (with the status code name when `with_code`).
void PrintError(const std::string& command, const absl::Status& status, bool with_code);

// "0.1,0.2" → budgets, each a fraction in (0, 1]; InvalidArgument naming --budgets otherwise.
absl::StatusOr<std::vector<double>> ParseBudgets(const std::string& list);

// Today's date (UTC) as YYYY-MM-DD, for reports.
std::string Today();

// Writes `text` to `path`; InternalError naming the path when it cannot.
absl::Status WriteFile(const std::string& path, const std::string& text);

}  // namespace glimpse::cli

namespace glimpse::cli {

// The shape every subcommand shares: parse flags (usage on --help, to stdout, exit 0; a parse
// error and usage to stderr, exit 2), convert them with `parse` (its error: exit 2), then `run`
// (its error: exit 1). Messages are prefixed with "glimpse <name>: ".
template <typename Options>
int RunSubcommand(const std::string& name, const std::string& usage,
                  const std::vector<FlagSpec>& flags, int argc, char** argv,
                  absl::StatusOr<Options> (*parse)(const Args&),
                  absl::Status (*run)(const Options&)) {
  auto args = Args::Parse(flags, argc, argv, 2);
  if (!args.ok() || args->Has("help")) {
    if (!args.ok()) PrintError(name, args.status(), /*with_code=*/false);
    std::fprintf(args.ok() ? stdout : stderr, "usage: glimpse %s %s\n%s", name.c_str(),
                 usage.c_str(), FlagHelp(flags).c_str());
    return args.ok() ? 0 : 2;
  }
  auto options = parse(*args);
  if (!options.ok()) {
    PrintError(name, options.status(), /*with_code=*/false);
    return 2;
  }
  if (absl::Status status = run(*options); !status.ok()) {
    PrintError(name, status, /*with_code=*/true);
    return 1;
  }
  return 0;
}

}  // namespace glimpse::cli

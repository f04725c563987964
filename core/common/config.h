// Service configuration: every service declares its keys (name, type, default, help) once; values
// come from the defaults, then a YAML file (--config FILE), then command-line flags
// (--name=value or --name value), later sources winning. Nested YAML maps flatten to dotted names
// (`storage: {path: x}` is `storage.path`). Errors name the key, the source and the bad value:
// an unknown key (in the file or on the command line), a value of the wrong type, a YAML syntax
// error (with line), a missing required key. `--help` makes Parse return the help text instead.
//
// Types: string, int (int64), double, bool (true/false), duration ("250ms", "30s", "5m", "2h"),
// bytes ("4096", "64KiB", "512MiB", "2GiB"), string list (YAML sequence or comma-separated flag).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glimpse {

enum class ConfigType { kString, kInt, kDouble, kBool, kDuration, kBytes, kStringList };

struct ConfigKey {
  std::string name;  // dotted, e.g. "storage.path"
  ConfigType type;
  std::string default_value;  // in flag syntax; "" with required = true means no default
  std::string help;
  bool required = false;
};

class Config {
 public:
  using Value =
      std::variant<std::string, int64_t, double, bool, absl::Duration, std::vector<std::string>>;

  // `program` and `summary` open the --help text. On --help, returns a Config whose
  // help_requested() is true and help_text() holds the text (the caller prints it and exits 0).
  static absl::StatusOr<Config> Parse(std::string_view program, std::string_view summary,
                                      const std::vector<ConfigKey>& keys, int argc,
                                      const char* const* argv);

  bool help_requested() const { return help_requested_; }
  const std::string& help_text() const { return help_text_; }

  // Typed getters; asking for an undeclared key or with the wrong type aborts (a programming
  // error, never input-dependent).
  const std::string& GetString(std::string_view name) const;
  int64_t GetInt(std::string_view name) const;
  double GetDouble(std::string_view name) const;
  bool GetBool(std::string_view name) const;
  absl::Duration GetDuration(std::string_view name) const;
  int64_t GetBytes(std::string_view name) const;
  const std::vector<std::string>& GetStringList(std::string_view name) const;

 private:
  bool help_requested_ = false;
  std::string help_text_;
  std::map<std::string, std::pair<ConfigType, Value>, std::less<>> values_;
};

}  // namespace glimpse

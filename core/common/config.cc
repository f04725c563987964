#include "core/common/config.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace glimpse {
namespace {

using KeyMap = std::map<std::string, const ConfigKey*, std::less<>>;

const char* TypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kString:
      return "string";
    case ConfigType::kInt:
      return "int";
    case ConfigType::kDouble:
      return "double";
    case ConfigType::kBool:
      return "bool";
    case ConfigType::kDuration:
      return "duration";
    case ConfigType::kBytes:
      return "bytes";
    case ConfigType::kStringList:
      return "string list";
  }
  return "?";
}

// "64KiB" -> 65536. Binary suffixes only: "MB" is ambiguous between 10^6 and 2^20.
std::optional<int64_t> ParseBytes(absl::string_view text) {
  static constexpr std::pair<absl::string_view, int> kSuffixes[] = {
      {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}};
  int shift = 0;
  for (const auto& [suffix, bits] : kSuffixes) {
    if (absl::ConsumeSuffix(&text, suffix)) {
      shift = bits;
      break;
    }
  }
  uint64_t n = 0;
  if (text.empty() || text[0] == '+' || text[0] == '-' || !absl::SimpleAtoi(text, &n)) {
    return std::nullopt;
  }
  if (n > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) >> shift)) {
    return std::nullopt;
  }
  return static_cast<int64_t>(n << shift);
}

// Parses `text` as `type`; errors say what was expected (the caller adds key and source).
absl::StatusOr<Config::Value> ParseValue(ConfigType type, absl::string_view text) {
  const auto bad = [&](absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not ", expected));
  };
  switch (type) {
    case ConfigType::kString:
      return Config::Value(std::string(text));
    case ConfigType::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an int");
      return Config::Value(v);
    }
    case ConfigType::kDouble: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a double");
      return Config::Value(v);
    }
    case ConfigType::kBool:
      if (text == "true") return Config::Value(true);
      if (text == "false") return Config::Value(false);
      return bad("a bool (true or false)");
    case ConfigType::kDuration: {
      absl::Duration d;
      if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() ||
          d == absl::InfiniteDuration()) {
        return bad("a duration (e.g. 250ms, 30s, 5m, 2h)");
      }
      return Config::Value(d);
    }
    case ConfigType::kBytes: {
      const std::optional<int64_t> v = ParseBytes(text);
      if (!v) return bad("a byte size (e.g. 4096, 64KiB, 512MiB, 2GiB)");
      return Config::Value(*v);
    }
    case ConfigType::kStringList: {
      std::vector<std::string> items;
      if (!text.empty()) items = absl::StrSplit(text, ',');
      return Config::Value(std::move(items));
    }
  }
  return bad("a known type");
}

// Parses and stores one value, naming key and source in any error.
absl::Status Set(const ConfigKey& key, absl::string_view text, absl::string_view source,
                 std::map<std::string, std::pair<ConfigType, Config::Value>, std::less<>>& out) {
  absl::StatusOr<Config::Value> value = ParseValue(key.type, text);
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": bad value for ", key.name, " (",
                                                   TypeName(key.type),
                                                   "): ", value.status().message()));
  }
  out[key.name] = {key.type, *std::move(value)};
  return absl::OkStatus();
}

bool IsSection(const KeyMap& keys, absl::string_view prefix) {
  const std::string dotted = absl::StrCat(prefix, ".");
  const auto it = keys.lower_bound(dotted);
  return it != keys.end() && absl::StartsWith(it->first, dotted);
}

// Walks a YAML map, flattening nested maps into dotted names.
absl::Status ApplyYaml(
    const YAML::Node& map, const std::string& prefix, const KeyMap& keys, const std::string& file,
    std::map<std::string, std::pair<ConfigType, Config::Value>, std::less<>>& out) {
  for (const auto& entry : map) {
    const YAML::Node& node = entry.second;
    const std::string where = absl::StrCat(file, ":", entry.first.Mark().line + 1);
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a key must be a plain name"));
    }
    const std::string name = prefix + entry.first.Scalar();
    const auto key = keys.find(name);
    if (key == keys.end()) {
      if (node.IsMap() && IsSection(keys, name)) {
        RETURN_IF_ERROR(ApplyYaml(node, name + ".", keys, file, out));
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key ", name));
    }
    const ConfigType type = key->second->type;
    if (node.IsNull() && (type == ConfigType::kString || type == ConfigType::kStringList)) {
      RETURN_IF_ERROR(Set(*key->second, "", where, out));  // `key:` with nothing means empty
    } else if (node.IsSequence() && type == ConfigType::kStringList) {
      std::vector<std::string> items;
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": bad value for ", name,
                                                         " (string list): items must be scalars"));
        }
        items.push_back(item.Scalar());
      }
      out[name] = {type, std::move(items)};
    } else if (node.IsScalar()) {
      RETURN_IF_ERROR(Set(*key->second, node.Scalar(), where, out));
    } else {
      const char* kind = node.IsMap() ? "a map" : node.IsSequence() ? "a sequence" : "empty";
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": bad value for ", name, " (", TypeName(type), "): got ", kind));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyFile(
    const std::string& file, const KeyMap& keys,
    std::map<std::string, std::pair<ConfigType, Config::Value>, std::less<>>& out) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", file));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();  // an empty file sets nothing
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", root.Mark().line + 1, ": the top level must be a map of keys"));
  }
  return ApplyYaml(root, "", keys, file, out);
}

std::string HelpText(absl::string_view program, absl::string_view summary,
                     const std::vector<ConfigKey>& keys) {
  std::string out = absl::StrCat(program, ": ", summary, "\n\nUsage: ", program,
                                 " [--config FILE] [--key=value | --key value]...\n\n"
                                 "  --config (string)\n      YAML file with any of the keys below; "
                                 "dotted names nest as maps. Flags override it.\n"
                                 "  --help\n      Print this help and exit.\n");
  for (const ConfigKey& key : keys) {
    const std::string dflt =
        key.required ? "required" : absl::StrCat("default \"", key.default_value, "\"");
    absl::StrAppend(&out, "  --", key.name, " (", TypeName(key.type), ", ", dflt, ")\n      ",
                    key.help, "\n");
  }
  return out;
}

}  // namespace

absl::StatusOr<Config> Config::Parse(std::string_view program, std::string_view summary,
                                     const std::vector<ConfigKey>& keys, int argc,
                                     const char* const* argv) {
  Config config;
  KeyMap by_name;
  for (const ConfigKey& key : keys) {
    if (key.name == "config" || key.name == "help" || !by_name.emplace(key.name, &key).second) {
      return absl::InvalidArgumentError(absl::StrCat("key declared twice or reserved: ", key.name));
    }
    if (key.required) continue;
    RETURN_IF_ERROR(Set(key, key.default_value, "default", config.values_));
  }

  // Flags, in order, as (name, value); the config file is read before any of them applies.
  std::vector<std::pair<std::string, std::string>> flags;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      config.help_requested_ = true;
      config.help_text_ = HelpText(std::string(program), std::string(summary), keys);
      return config;
    }
    if (!absl::ConsumePrefix(&arg, "--") || arg.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[i], "'"));
    }
    const size_t eq = arg.find('=');
    std::string name(arg.substr(0, eq));
    const auto key = by_name.find(name);
    if (name != "config" && key == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (key != by_name.end() && key->second->type == ConfigType::kBool) {
      // A bare bool flag means true; "--flag false" is accepted too.
      const bool next_is_bool = i + 1 < argc && (absl::string_view(argv[i + 1]) == "true" ||
                                                 absl::string_view(argv[i + 1]) == "false");
      value = next_is_bool ? argv[++i] : "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (name == "config") {
      if (value.empty()) return absl::InvalidArgumentError("flag --config needs a file name");
      file = value;
    } else {
      flags.emplace_back(std::move(name), std::move(value));
    }
  }

  if (!file.empty()) RETURN_IF_ERROR(ApplyFile(file, by_name, config.values_));
  for (const auto& [name, value] : flags) {
    RETURN_IF_ERROR(Set(*by_name.at(name), value, absl::StrCat("flag --", name), config.values_));
  }
  for (const ConfigKey& key : keys) {
    if (config.values_.count(key.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("missing required key ", key.name, " (",
                                                     TypeName(key.type),
                                                     "): set it in the config "
                                                     "file or with --",
                                                     key.name, "=..."));
    }
  }
  return config;
}

namespace {

// Getter misuse is a programming error: report and abort.
template <typename T, typename Map>
const T& Get(const Map& values, std::string_view name, ConfigType type) {
  const auto it = values.find(name);
  if (it == values.end() || it->second.first != type) {
    std::fprintf(stderr, "Config: key '%.*s' is not declared as %s\n",
                 static_cast<int>(name.size()), name.data(), TypeName(type));
    std::abort();
  }
  return std::get<T>(it->second.second);
}

}  // namespace

const std::string& Config::GetString(std::string_view name) const {
  return Get<std::string>(values_, name, ConfigType::kString);
}
int64_t Config::GetInt(std::string_view name) const {
  return Get<int64_t>(values_, name, ConfigType::kInt);
}
double Config::GetDouble(std::string_view name) const {
  return Get<double>(values_, name, ConfigType::kDouble);
}
bool Config::GetBool(std::string_view name) const {
  return Get<bool>(values_, name, ConfigType::kBool);
}
absl::Duration Config::GetDuration(std::string_view name) const {
  return Get<absl::Duration>(values_, name, ConfigType::kDuration);
}
int64_t Config::GetBytes(std::string_view name) const {
  return Get<int64_t>(values_, name, ConfigType::kBytes);
}
const std::vector<std::string>& Config::GetStringList(std::string_view name) const {
  return Get<std::vector<std::string>>(values_, name, ConfigType::kStringList);
}

}  // namespace glimpse

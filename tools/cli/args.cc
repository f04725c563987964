#include "tools/cli/args.h"

#include <ctime>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace glimpse::cli {
namespace {

const FlagSpec* FindSpec(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<Args> Args::Parse(const std::vector<FlagSpec>& specs, int argc, char** argv,
                                 int first) {
  Args args;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline_value = true;
    }
    const FlagSpec* spec = FindSpec(specs, name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (spec->is_bool) {
      if (has_inline_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      value = "true";
    } else if (!has_inline_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    args.values_[name] = value;
  }
  return args;
}

std::string Args::GetString(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects an integer, got '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects a number, got '", it->second, "'"));
  }
  return value;
}

std::string FlagHelp(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    const std::string flag =
        s.is_bool ? absl::StrCat("--", s.name) : absl::StrCat("--", s.name, " VALUE");
    absl::StrAppendFormat(&out, "  %-22s %s", flag, s.help);
    if (!s.default_value.empty()) absl::StrAppend(&out, " (default: ", s.default_value, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

void PrintError(const std::string& command, const absl::Status& status, bool with_code) {
  const std::string text = with_code ? status.ToString() : std::string(status.message());
  std::fprintf(stderr, "glimpse %s: %s\n", command.c_str(), text.c_str());
}

absl::StatusOr<std::vector<double>> ParseBudgets(const std::string& list) {
  std::vector<double> budgets;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    double b = 0.0;
    if (!absl::SimpleAtod(part, &b) || !(b > 0.0 && b <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budgets: '", std::string(part), "' is not a fraction in (0, 1]"));
    }
    budgets.push_back(b);
  }
  if (budgets.empty()) return absl::InvalidArgumentError("--budgets names no budget");
  return budgets;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace glimpse::cli

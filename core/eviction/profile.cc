#include "core/eviction/profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace glimpse::eviction {
namespace {

constexpr char kFormat[] = "glimpse-eviction-profile/1";
constexpr int64_t kMaxSinks = 1024;
constexpr int64_t kMaxRecentWindow = 1 << 16;

using nlohmann::json;

// The module's path without ".safetensors", the stem its sibling files extend.
std::string ModuleStem(std::string_view lookahead_module) {
  constexpr std::string_view kModuleSuffix = ".safetensors";
  std::string path(lookahead_module);
  if (path.size() > kModuleSuffix.size() &&
      path.compare(path.size() - kModuleSuffix.size(), kModuleSuffix.size(), kModuleSuffix) == 0) {
    path.resize(path.size() - kModuleSuffix.size());
  }
  return path;
}

constexpr std::pair<Schedule, std::string_view> kSchedules[] = {
    {Schedule::kUniform, "uniform"}, {Schedule::kPyramid, "pyramid"}, {Schedule::kCake, "cake"}};
constexpr std::pair<Granularity, std::string_view> kGranularities[] = {
    {Granularity::kPerHead, "per_head"},
    {Granularity::kPerLayer, "per_layer"},
    {Granularity::kGlobal, "global"}};

template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseName(const std::pair<Enum, std::string_view> (&table)[N],
                               std::string_view name, std::string_view what) {
  std::vector<std::string> names;
  for (const auto& [value, n] : table) {
    if (n == name) return value;
    names.emplace_back(n);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", std::string(what), " \"",
                                                 std::string(name), "\" (",
                                                 absl::StrJoin(names, ", "), ")"));
}

// Checks a settings entry without building the scorer (a LookaheadKV scorer needs its module).
absl::Status Validate(const MethodSettings& s) {
  RETURN_IF_ERROR(CheckScorerShape(s.scorer));
  if (s.scorer.window < 0 || s.scorer.window > kMaxRecentWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("window ", s.scorer.window, " out of range [0, ", kMaxRecentWindow, "]"));
  }
  if (s.sinks < 0 || s.sinks > kMaxSinks || s.recent_window < 0 ||
      s.recent_window > kMaxRecentWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("sinks ", s.sinks, " or recent_window ", s.recent_window, " out of range"));
  }
  if (s.schedule == Schedule::kCake && s.scorer.method != "cake") {
    return absl::InvalidArgumentError("schedule cake needs the cake scorer");
  }
  return absl::OkStatus();
}

absl::StatusOr<MethodSettings> SettingsFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("a method's settings must be an object");
  MethodSettings s;
  s.scorer.method = j.value("scorer", "");
  s.scorer.window = j.value("window", int64_t{0});
  s.scorer.kernel = j.value("kernel", int64_t{0});
  s.scorer.pooling = j.value("pooling", "");
  s.sinks = j.value("sinks", s.sinks);
  s.recent_window = j.value("recent_window", s.recent_window);
  ASSIGN_OR_RETURN(s.schedule, ParseName(kSchedules, j.value("schedule", "uniform"), "schedule"));
  ASSIGN_OR_RETURN(s.granularity,
                   ParseName(kGranularities, j.value("granularity", "per_head"), "granularity"));
  RETURN_IF_ERROR(Validate(s));
  // Kernel 1 pools nothing: a windowless scorer's is its default, one setting under one name.
  if (s.scorer.window == 0 && s.scorer.kernel == 1 &&
      ScorerWindowDefaults(s.scorer.method)->window == 0) {
    s.scorer.kernel = 0;
    s.scorer.pooling.clear();
  }
  return s;
}

json SettingsToJson(const MethodSettings& s) {
  json j = {{"scorer", s.scorer.method}};
  if (s.scorer.window != 0) j["window"] = s.scorer.window;
  if (s.scorer.kernel != 0) j["kernel"] = s.scorer.kernel;
  if (!s.scorer.pooling.empty()) j["pooling"] = s.scorer.pooling;
  j["sinks"] = s.sinks;
  j["recent_window"] = s.recent_window;
  j["schedule"] = std::string(ScheduleName(s.schedule));
  j["granularity"] = std::string(GranularityName(s.granularity));
  return j;
}

}  // namespace

std::vector<std::string> PolicyMethods() {
  std::vector<std::string> names = KnownScorers();
  names.push_back("pyramidkv");
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<MethodSettings> BuiltInSettings(std::string_view method) {
  MethodSettings s;
  s.scorer.method = method == "pyramidkv" ? "snapkv" : std::string(method);
  if (method == "pyramidkv") s.schedule = Schedule::kPyramid;
  if (method == "cake") s.schedule = Schedule::kCake;
  absl::StatusOr<WindowDefaults> defaults = ScorerWindowDefaults(s.scorer.method);
  if (!defaults.ok()) {
    return absl::NotFoundError(absl::StrCat("unknown eviction method \"", std::string(method),
                                            "\"; known: ", absl::StrJoin(PolicyMethods(), ", ")));
  }
  // A windowless scorer's kernel stays 0, its default: unpooled, and named so in Describe().
  if (defaults->window > 0) {
    s.scorer.window = defaults->window;
    s.scorer.kernel = defaults->kernel;
    s.scorer.pooling = "avg";
  }
  return s;
}

SelectionOptions SelectionFor(const MethodSettings& settings, int64_t scorer_window,
                              double budget_ratio, int64_t total_tokens) {
  SelectionOptions o;
  o.sinks = settings.sinks;
  o.window = scorer_window > 0 ? scorer_window : settings.recent_window;
  o.schedule = settings.schedule;
  o.granularity = settings.granularity;
  o.budget_tokens = std::max<int64_t>(
      static_cast<int64_t>(std::ceil(budget_ratio * static_cast<double>(total_tokens))),
      o.sinks + o.window);
  return o;
}

absl::StatusOr<EvictionProfile> EvictionProfile::Load(const std::string& path,
                                                      std::string_view model_fingerprint) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("eviction profile ", path, " cannot be read"));
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("eviction profile ", path, " is not JSON"));
  }
  ASSIGN_OR_RETURN(EvictionProfile profile, FromJson(doc, model_fingerprint, path));
  profile.source_ = path;
  return profile;
}

absl::StatusOr<EvictionProfile> EvictionProfile::FromJson(const json& doc,
                                                          std::string_view model_fingerprint,
                                                          std::string_view where) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("eviction profile ", std::string(where), ": ", std::string(what)));
  };
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != kFormat) {
    return bad(absl::StrCat("\"format\" is not \"", kFormat, "\""));
  }
  EvictionProfile profile;
  if (!doc.contains("model_fingerprint") || !doc["model_fingerprint"].is_string()) {
    return bad("\"model_fingerprint\" must be a string");
  }
  profile.model_fingerprint_ = doc["model_fingerprint"].get<std::string>();
  if (!model_fingerprint.empty() && profile.model_fingerprint_ != model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("eviction profile ", std::string(where), " was tuned for model ",
                     profile.model_fingerprint_, ", not for this model (",
                     std::string(model_fingerprint), "); run glimpse tune for it"));
  }
  const json& methods = doc.contains("methods") ? doc["methods"] : json::object();
  if (!methods.is_object()) return bad("\"methods\" must be an object");
  const std::vector<std::string> known = PolicyMethods();
  for (const auto& [name, entry] : methods.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return bad(absl::StrCat("unknown method \"", name, "\""));
    }
    absl::StatusOr<MethodSettings> settings = absl::InvalidArgumentError("wrong value types");
    try {
      settings = SettingsFromJson(entry);
    } catch (const json::exception& e) {
      settings = absl::InvalidArgumentError(e.what());
    }
    if (!settings.ok()) return bad(absl::StrCat(name, ": ", settings.status().message()));
    profile.methods_[name] = *std::move(settings);
  }
  return profile;
}

json EvictionProfile::ToJson() const {
  json methods = json::object();
  for (const auto& [name, settings] : methods_) methods[name] = SettingsToJson(settings);
  return {{"format", kFormat}, {"model_fingerprint", model_fingerprint_}, {"methods", methods}};
}

absl::StatusOr<MethodSettings> EvictionProfile::For(std::string_view method) const {
  const auto it = methods_.find(method);
  if (it != methods_.end()) return it->second;
  return BuiltInSettings(method);
}

void EvictionProfile::Set(const std::string& method, const MethodSettings& settings) {
  methods_[method] = settings;
}

std::string ProfilePathFor(std::string_view lookahead_module) {
  return ModuleStem(lookahead_module) + ".eviction.json";
}

std::string GateWeightsPathFor(std::string_view lookahead_module, std::string_view gate) {
  return absl::StrCat(ModuleStem(lookahead_module), ".", std::string(gate), ".safetensors");
}

absl::Status AttachLearnedFiles(ScorerConfig& config, std::string_view lookahead_module) {
  const bool lookahead = config.method == "lookahead";
  if (!lookahead && !(TakesWeights(config.method) && config.weights_path.empty())) {
    return absl::OkStatus();
  }
  if (lookahead_module.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method \"", config.method, "\" needs ",
        lookahead ? "a LookaheadKV module" : "trained gate weights beside a LookaheadKV module",
        "; none is configured (config key lookahead_module, --module)"));
  }
  if (lookahead) {
    config.module_path = std::string(lookahead_module);
    return absl::OkStatus();
  }
  std::string path = GateWeightsPathFor(lookahead_module, config.method);
  if (!std::filesystem::exists(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("method \"", config.method, "\" needs trained weights at ", path,
                     " (tools/gates/train.py writes them beside the module named by "
                     "config key lookahead_module / --module; --weights names another file)"));
  }
  config.weights_path = std::move(path);
  return absl::OkStatus();
}

absl::StatusOr<EvictionProfile> ResolveProfile(std::string_view path,
                                               std::string_view lookahead_module,
                                               std::string_view model_fingerprint) {
  if (path == "none") return EvictionProfile();
  if (!path.empty()) return EvictionProfile::Load(std::string(path), model_fingerprint);
  if (lookahead_module.empty()) return EvictionProfile();
  const std::string beside = ProfilePathFor(lookahead_module);
  if (!std::ifstream(beside)) return EvictionProfile();
  return EvictionProfile::Load(beside, model_fingerprint);
}

std::string_view ScheduleName(Schedule schedule) {
  for (const auto& [value, name] : kSchedules) {
    if (value == schedule) return name;
  }
  return "?";
}

std::string_view GranularityName(Granularity granularity) {
  for (const auto& [value, name] : kGranularities) {
    if (value == granularity) return name;
  }
  return "?";
}

std::string Describe(const MethodSettings& s) {
  // An unstated (0) window or kernel is shown as what the scorer runs with: the method's default.
  const absl::StatusOr<WindowDefaults> defaults = ScorerWindowDefaults(s.scorer.method);
  const WindowDefaults d = defaults.ok() ? *defaults : WindowDefaults{};
  const int64_t window = s.scorer.window > 0 ? s.scorer.window : d.window;
  const int64_t kernel = s.scorer.kernel > 0 ? s.scorer.kernel : d.kernel;
  std::string out = s.scorer.method;
  if (window > 0) absl::StrAppend(&out, " W=", window);
  if (window > 0 || kernel > 1) {  // a windowless kernel of 1 pools nothing
    absl::StrAppend(&out, " k=", kernel, " ", s.scorer.pooling.empty() ? "avg" : s.scorer.pooling);
  }
  absl::StrAppend(&out, ", sinks ", s.sinks);
  if (window == 0) absl::StrAppend(&out, ", recent ", s.recent_window);
  absl::StrAppend(&out, ", ", std::string(ScheduleName(s.schedule)), " ",
                  std::string(GranularityName(s.granularity)));
  return out;
}

}  // namespace glimpse::eviction

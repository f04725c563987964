// The scorer registry: method name → factory plus the method's defaults. CreateScorer resolves the
// config against the entry (0 / "" = the method's default), rejects parameters the method does not
// take, and checks ranges before building the scorer.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"

namespace glimpse::eviction {
namespace {

constexpr int64_t kMaxWindow = 1 << 16;
constexpr int64_t kMaxKernel = 255;

struct Params {
  int64_t window = 0;
  int64_t kernel = 0;
  Pooling pooling = Pooling::kAvg;
  std::string weights_path;  // learned gates only
};

struct Method {
  // Defaults (WindowDefaults in scorer.h): window 0, no observation window; kernel 0, no kernel or
  // pooling either; a windowless method with a kernel has its scores pooled by NewPooledScorer.
  int64_t window = 0;
  int64_t kernel = 0;
  std::unique_ptr<Scorer> (*make)(const Params&) = nullptr;
  // Learned gates: built from Params::weights_path (required for them, rejected for the others).
  absl::StatusOr<std::unique_ptr<Scorer>> (*load)(const Params&) = nullptr;
  // Methods built from a module file (lookahead): module_path is required there (the opener
  // checks) and rejected for every other method.
  absl::StatusOr<std::unique_ptr<Scorer>> (*open)(const std::string& module_path,
                                                  int64_t window) = nullptr;
  // A method without a window by default that may be given one (LookaheadKV: the prompt's last
  // W queries beside its rows; window 0 leaves them out).
  bool window_optional = false;
};

const std::map<std::string, Method>& Registry() {
  static const auto* registry = new std::map<std::string, Method>{
      {"snapkv",  // kvpress SnapKVPress defaults
       {64, 5, [](const Params& p) { return NewSnapKvScorer(p.window, p.kernel, p.pooling); }}},
      {"streamingllm", {0, 0, [](const Params&) { return NewStreamingLlmScorer(); }}},
      {"h2o", {0, 1, [](const Params&) { return NewH2oScorer(); }}},
      {"expected_attention", {0, 1, [](const Params&) { return NewExpectedAttentionScorer(); }}},
      {"defensivekv",  // FFY0/DefensiveKV EfficientDefensiveKVPress defaults
       {32, 5,
        [](const Params& p) { return NewDefensiveKvScorer(p.window, p.kernel, p.pooling); }}},
      {"cake",  // antgroup/cakekv pred_cake.py defaults (W = 32, avg_pool1d k = 5)
       {32, 5, [](const Params& p) { return NewCakeScorer(p.window, p.kernel, p.pooling); }}},
      {"kvzip_gate",
       {0, 1, nullptr, [](const Params& p) { return NewKvzipGateScorer(p.weights_path); }}},
      {"trimkv_gate",
       {0, 1, nullptr, [](const Params& p) { return NewTrimKvGateScorer(p.weights_path); }}},
      {"retention_global",
       {0, 1, nullptr, [](const Params& p) { return NewRetentionGlobalScorer(p.weights_path); }}},
      {"foresightkv",
       {0, 1, nullptr, [](const Params& p) { return NewForesightScorer(p.weights_path); }}},
      {"lookahead", {0, 1, nullptr, nullptr, NewLookaheadScorer, true}},  // LookaheadKV, --module
  };
  return *registry;
}

absl::Status UnknownScorer(std::string_view method) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : Registry()) names.push_back(name);
  return absl::NotFoundError(absl::StrCat("unknown scorer \"", std::string(method),
                                          "\"; known: ", absl::StrJoin(names, ", ")));
}

// Window, kernel and pooling of `config` against the method's defaults (the weights are Resolve's).
absl::Status ResolveShape(const ScorerConfig& config, const Method& method, Params& p) {
  const std::string& who = config.method;
  if (method.kernel == 0) {
    if (config.window != 0 || config.kernel != 0 || !config.pooling.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " takes no window, kernel or pooling (got window=", config.window,
                       " kernel=", config.kernel, " pooling=\"", config.pooling, "\")"));
    }
    return absl::OkStatus();
  }
  if (method.window == 0 && !method.window_optional && config.window != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " takes no window (got ", config.window, "); only kernel and pooling"));
  }
  p.window = config.window == 0 ? method.window : config.window;
  p.kernel = config.kernel == 0 ? method.kernel : config.kernel;
  const int64_t min_window = method.window_optional ? 0 : 1;
  if ((method.window > 0 || method.window_optional) &&
      (p.window < min_window || p.window > kMaxWindow)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": window ", p.window, " is outside [",
                                                   min_window, ", ", kMaxWindow, "]"));
  }
  if (p.kernel < 1 || p.kernel > kMaxKernel || p.kernel % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": pooling kernel ", p.kernel,
                                                   " must be odd and in [1, ", kMaxKernel, "]"));
  }
  if (config.pooling.empty() || config.pooling == "avg") {
    p.pooling = Pooling::kAvg;
  } else if (config.pooling == "max") {
    p.pooling = Pooling::kMax;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": unknown pooling \"", config.pooling, "\" (avg or max)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Params> Resolve(const ScorerConfig& config, const Method& method) {
  const std::string& who = config.method;
  Params p;
  if ((method.load != nullptr) != !config.weights_path.empty()) {
    return absl::InvalidArgumentError(
        method.load != nullptr
            ? absl::StrCat(who, " needs weights_path (--weights)")
            : absl::StrCat(who, " takes no weights_path (got \"", config.weights_path, "\")"));
  }
  p.weights_path = config.weights_path;
  RETURN_IF_ERROR(ResolveShape(config, method, p));
  return p;
}

}  // namespace

std::vector<std::string> KnownScorers() {
  std::vector<std::string> names;
  for (const auto& [name, method] : Registry()) names.push_back(name);
  return names;
}

bool TakesWeights(std::string_view method) {
  const auto it = Registry().find(std::string(method));
  return it != Registry().end() && it->second.load != nullptr;
}

absl::StatusOr<WindowDefaults> ScorerWindowDefaults(std::string_view method) {
  const auto it = Registry().find(std::string(method));
  if (it == Registry().end()) return UnknownScorer(method);
  return WindowDefaults{.window = it->second.window,
                        .kernel = it->second.kernel,
                        .window_optional = it->second.window_optional};
}

absl::Status CheckScorerShape(const ScorerConfig& config) {
  const auto it = Registry().find(config.method);
  if (it == Registry().end()) return UnknownScorer(config.method);
  Params unused;
  return ResolveShape(config, it->second, unused);
}

absl::StatusOr<std::unique_ptr<Scorer>> CreateScorer(const ScorerConfig& config) {
  const auto it = Registry().find(config.method);
  if (it == Registry().end()) return UnknownScorer(config.method);
  const Method& method = it->second;
  if (method.open == nullptr && !config.module_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.method, " takes no module_path (got \"", config.module_path, "\")"));
  }
  ASSIGN_OR_RETURN(const Params params, Resolve(config, method));
  std::unique_ptr<Scorer> scorer;
  if (method.open != nullptr) {
    ASSIGN_OR_RETURN(scorer, method.open(config.module_path, params.window));
  } else if (method.load != nullptr) {
    ASSIGN_OR_RETURN(scorer, method.load(params));
  } else {
    scorer = method.make(params);
  }
  if (method.window == 0 && params.kernel > 1) {
    return NewPooledScorer(std::move(scorer), params.kernel, params.pooling);
  }
  return scorer;
}

}  // namespace glimpse::eviction

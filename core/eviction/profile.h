// Eviction profiles: the settings every eviction method runs with for one model, chosen by
// measurement (`glimpse tune`, core/eviction/eval/tune.h) and read by the workers, `glimpse evict`
// and `glimpse eval`, so that a user picks a method and a budget and nothing else.
//
// A policy method (what a session names: "snapkv", "pyramidkv", "lookahead", …) resolves to
// MethodSettings: the scorer and its parameters (observation window W, pooling kernel and kind)
// and the selection around it (sinks, the recent window of scorers without their own, schedule,
// granularity; selection.h). A method the profile does not list, or every method without a
// profile, gets the built-in settings: the scorer registry's defaults (scorer.h: SnapKV W = 64,
// k = 5, avg, as kvpress), 4 sinks, a 32-token recent window, uniform budgets per head;
// "pyramidkv" is SnapKV's scorer under the pyramid schedule.
//
// File: JSON, written by `glimpse tune` next to the model's LookaheadKV module as
// <module stem>.eviction.json:
//   {"format": "glimpse-eviction-profile/1", "model_fingerprint": "<32 hex digits>",
//    "methods": {"snapkv": {"scorer": "snapkv", "window": 16, "kernel": 7, "pooling": "max",
//                           "sinks": 4, "recent_window": 32, "schedule": "uniform",
//                           "granularity": "per_head"}, …},
//    "tuning": {…}}            provenance and measurements; readers ignore it
// "window", "kernel" and "pooling" appear only for scorers that take them. Thread-compatible;
// a loaded profile is immutable and safe to share.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction {

struct MethodSettings {
  // The scorer (method = a registry name) and its parameters; module_path and weights_path are
  // never part of a profile: the caller fills them (a worker from its config).
  ScorerConfig scorer;
  int64_t sinks = 4;
  int64_t recent_window = 32;  // always-kept last entries; a window scorer's W replaces it
  Schedule schedule = Schedule::kUniform;
  Granularity granularity = Granularity::kPerHead;
};

// The method names a session may name: every scorer (KnownScorers()) and "pyramidkv", sorted.
std::vector<std::string> PolicyMethods();

// The built-in settings of a policy method; NotFound (listing PolicyMethods()) for another name.
absl::StatusOr<MethodSettings> BuiltInSettings(std::string_view method);

// The selection of one turn under `settings` at `budget_ratio` in (0, 1] of `total_tokens` (the
// tokens the session summarises after the turn): per (layer, kv-head)
// C = max(ceil(ratio · tokens), F), F = sinks + W with W = `scorer_window` when > 0 (the scorer's
// own, Scorer::window()), else settings.recent_window.
SelectionOptions SelectionFor(const MethodSettings& settings, int64_t scorer_window,
                              double budget_ratio, int64_t total_tokens);

class EvictionProfile {
 public:
  // The built-in settings for every method, bound to no model.
  EvictionProfile() = default;

  // Reads a profile file. NotFound for a missing file; InvalidArgument (naming the file and the
  // field) for malformed JSON, another format, an unknown method, scorer, schedule or granularity
  // name, or a value out of range; FailedPrecondition when `model_fingerprint` is not empty and
  // differs from the file's (naming both).
  static absl::StatusOr<EvictionProfile> Load(const std::string& path,
                                              std::string_view model_fingerprint);
  // The same checks on a parsed document; `where` names it in errors.
  static absl::StatusOr<EvictionProfile> FromJson(const nlohmann::json& doc,
                                                  std::string_view model_fingerprint,
                                                  std::string_view where);

  // The document Load reads back (without "tuning", which the caller adds).
  nlohmann::json ToJson() const;

  // The settings of `method`: the profile's entry, else BuiltInSettings(method).
  absl::StatusOr<MethodSettings> For(std::string_view method) const;
  // Sets (replaces) the entry of a policy method.
  void Set(const std::string& method, const MethodSettings& settings);

  const std::string& model_fingerprint() const { return model_fingerprint_; }
  void set_model_fingerprint(std::string fingerprint) {
    model_fingerprint_ = std::move(fingerprint);
  }
  // Where it came from, for logs: the file, or "built-in".
  const std::string& source() const { return source_; }

 private:
  std::string model_fingerprint_;
  std::string source_ = "built-in";
  std::map<std::string, MethodSettings, std::less<>> methods_;
};

// Where `glimpse tune` writes a model's profile: beside its LookaheadKV module, the module's path
// with ".safetensors" replaced by ".eviction.json" (appended when the path has another suffix).
std::string ProfilePathFor(std::string_view lookahead_module);

// Where a model's trained gate weights live: beside its LookaheadKV module, the module's path with
// ".safetensors" replaced by ".<gate>.safetensors" (tools/gates/train.py writes them there).
std::string GateWeightsPathFor(std::string_view lookahead_module, std::string_view gate);

// Fills the file `config.method`'s scorer is built from, out of the model's learned files:
// module_path = `lookahead_module` for "lookahead"; weights_path = GateWeightsPathFor(…) for a
// learned gate (TakesWeights) unless the config already names one. Other methods are left as
// they are. FailedPrecondition, naming the config key, when the file is missing.
absl::Status AttachLearnedFiles(ScorerConfig& config, std::string_view lookahead_module);

// The profile a service runs with, from its config: `path` "none" → built-in; another non-empty
// path → Load(path, fingerprint), whose errors are returned; empty → the file at
// ProfilePathFor(lookahead_module) when a module is named and that file exists, else built-in.
absl::StatusOr<EvictionProfile> ResolveProfile(std::string_view path,
                                               std::string_view lookahead_module,
                                               std::string_view model_fingerprint);

// "uniform" / "pyramid" / "cake" and "per_head" / "per_layer" / "global".
std::string_view ScheduleName(Schedule schedule);
std::string_view GranularityName(Granularity granularity);

// A one-line description of settings, e.g. "snapkv W=16 k=7 max, sinks 4, uniform per_head".
std::string Describe(const MethodSettings& settings);

}  // namespace glimpse::eviction

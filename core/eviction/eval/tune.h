// `glimpse tune`: each eviction method's settings for one model, chosen by measurement on the
// calibration set (calibration.h), never on the evaluation suite (tasks.h), and returned as the
// model's eviction profile (core/eviction/profile.h).
//
// Objective, lower is better: the mean over calibration tasks and budgets of KL(full ‖ evicted)
// of the next-token distributions along the full cache's own greedy answer (teacher-forced,
// answer_tokens long; runner.h with kl_only).
//
// Search per method, in two stages (coordinate descent; every candidate of a stage runs on one
// prefill per task, runner.h):
//   1. the scorer's parameters under the built-in selection: SnapKV and PyramidKV window
//      W ∈ {8, 16, 32, 64} × pooling kernel ∈ {1, 5, 9} × pooling ∈ {avg, max} (kernel 1 pools
//      nothing, avg or max); DefensiveKV and CAKE W × kernel (avg); scorers without a window that
//      may be pooled (LookaheadKV, the learned gates, H2O, Expected Attention; pooled_scorer.cc)
//      kernel ∈ {5, 9} × pooling beside their unpooled built-in; StreamingLLM has none;
//   2. the selection around the stage-1 winner: sinks ∈ {4, 16} (never 0: the attention sink) ×
//      recent window ∈ {16, 32, 64} (scorers without their own window) × granularity ∈ {per
//      head, per layer (AdaKV)} × schedule ∈ {uniform, pyramid} (PyramidKV keeps pyramid, CAKE
//      its own).
// The built-in settings are stage 1's first candidate and the stage-1 winner stage 2's. A stage's
// winner is the candidate with the lowest objective among those whose KL at every budget is at
// most 2 % above the stage's first candidate's (no trading one budget for another), the earlier
// one on ties; so a method keeps its built-in settings unless another candidate measures better,
// and its tuned KL never exceeds the built-in's on the calibration set.
// Every candidate keeps the same number of entries at a budget as long as the budget is above
// SelectionFor's floor (sinks + window <= 16 + 64): calibration prompts of >= 1024 tokens at 10 %.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/tasks.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::eviction::eval {

struct TuneOptions {
  std::vector<std::string> methods;  // policy methods (PolicyMethods())
  std::vector<double> budgets = {0.1, 0.2, 0.3, 0.5};
  int32_t answer_tokens = 32;
  std::string lookahead_module;  // for method "lookahead"
};

struct CandidateScore {
  MethodSettings settings;
  double kl = 0.0;                   // the objective: the mean of kl_by_budget
  std::vector<double> kl_by_budget;  // [budget] mean KL over the tasks
};

struct MethodTuning {
  std::string method;
  MethodSettings built_in, tuned;
  double built_in_kl = 0.0, tuned_kl = 0.0;
  std::vector<CandidateScore> candidates;  // both stages, in the order they were listed
};

// Stage 1's and stage 2's candidates for a method, as listed above (first: the incumbent).
std::vector<MethodSettings> ScorerCandidates(const std::string& method,
                                             const MethodSettings& built_in);
std::vector<MethodSettings> SelectionCandidates(const std::string& method,
                                                const MethodSettings& winner);

// Runs both stages over `tasks`. `progress(done, total)` (may be empty) is called after every
// cache content scored. InvalidArgument for an unknown method or an empty task list.
absl::StatusOr<std::vector<MethodTuning>> Tune(
    const model::Model& model, kernels::ThreadPool& pool, const std::vector<Task>& tasks,
    const TuneOptions& options, const std::function<void(int64_t, int64_t)>& progress = {});

// The tuned methods as a profile for `model_fingerprint`.
EvictionProfile ProfileOf(const std::vector<MethodTuning>& tuned,
                          const std::string& model_fingerprint);

// | method | built-in | KL | tuned | KL | change | as markdown.
std::string TuneTable(const std::vector<MethodTuning>& tuned);

}  // namespace glimpse::eviction::eval

// Runs one task of the quality suite under the full cache and every (arm, budget).
//
// An arm is what is evaluated: a label (a policy method such as "snapkv", or a tuning candidate)
// with its settings (core/eviction/profile.h: scorer parameters, sinks, recent window, schedule,
// granularity). `glimpse eval` makes one arm per named method from the model's eviction profile;
// `glimpse tune` many per method.
//
// One prefill per task serves every arm and budget: PrefillAndEvict runs the prompt once with a
// scorer that holds every distinct scorer of the arms (it captures the union of their needs,
// scores every layer with each and keeps everything), then for each arm and budget the cache is
// set to Select()'s kept entries of that scorer's scores and the continuation is scored without
// keeping it (continuation.h). Each arm's selection is eviction::SelectionFor(settings, scorer
// window, budget, T), the workers' rule. The full cache runs through exactly the same code as a
// budget of 1, so that budget reproduces it bit for bit.
//
// Convention (the workers', and kvpress's pipeline): the prompt is the chat template through the
// assistant header; every token of it but the last is prefilled and evicted, and the last token
// and everything after it (the answer, later turns) run over the evicted cache.
// The reference answers come from a plain prefill of the prompt (also timed: the denominator of
// the scoring overhead) decoded greedily; the full cache's own row is then scored like any run.
// Turn 2 of a two-turn task sees the full cache's turn-1 answer as history (SCBench-style fixed
// history), so its score isolates what eviction dropped from turn 1's context.
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

struct Arm {
  std::string label;
  MethodSettings settings;
  // LAQ (laq.h): the settings are SnapKV's (stage 1); 8 draft tokens then rescore.
  bool laq = false;
};

// Arms for named methods: a policy method (PolicyMethods()) gets profile.For(method); "laq" gets
// SnapKV's settings with the laq flag. NotFound for another name.
absl::StatusOr<std::vector<Arm>> ArmsFor(const std::vector<std::string>& methods,
                                         const EvictionProfile& profile);

struct RunOptions {
  std::vector<Arm> arms;
  std::vector<double> budgets;        // fractions of the prompt in (0, 1]
  int32_t max_answer_tokens = 16;     // per turn, end-of-generation token included
  std::string lookahead_module = {};  // the module file (.safetensors) of scorer "lookahead"
  int32_t laq_draft_tokens = 8;
  // Only KL: no free-running greedy answers (agreement 0, correct false, answer ""), which costs
  // a few decode steps per run; what `glimpse tune` measures.
  bool kl_only = false;
};

// One cache content's scores on one task.
struct RunScores {
  std::string method;  // the arm's label; "full" for the full cache
  double budget = 1.0;
  bool correct = false;    // the last turn's answer contains the expected number
  std::string answer;      // the last turn's answer text
  double agreement = 0.0;  // mean over turns of GreedyAgreement
  double kl = 0.0;         // mean KL(full ‖ this) over the script's answer rows
  // The method's Score() over all layers (+ LookaheadKV's second pass; + LAQ's draft decode and
  // rescoring) + Select() + cache compaction.
  double scoring_seconds = 0.0;
};

struct TaskScores {
  TaskKind kind = TaskKind::kNeedleSingle;
  uint64_t seed = 0;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;          // plain prefill of the prompt, no capture
  double capture_prefill_seconds = 0.0;  // prefill capturing the union of the methods' needs
  RunScores full;
  std::vector<RunScores> runs;  // arms × budgets, in the options' order
  // What another engine needs to run the task the same way (glimpse eval --export): the evicted
  // prompt, and every token fed after eviction before the scored answer (the prompt's last token;
  // in a two-turn task also the full cache's turn-1 answer and turn 2's rows).
  std::vector<int32_t> evicted_prompt;
  std::vector<int32_t> fed_before_answer;
};

// InvalidArgument for a scorer that cannot be built, a budget outside (0, 1], or a prompt shorter
// than an arm's sinks + window. `on_run` (may be empty) is called after each cache content.
absl::StatusOr<TaskScores> RunTask(const model::Model& model, kernels::ThreadPool& pool,
                                   const Task& task, const RunOptions& options,
                                   const std::function<void()>& on_run = {});

// The prompt that is evicted: the chat template of turn 1 through the assistant header, but its
// last token.
std::vector<int32_t> EvictedPrompt(const model::Tokenizer& tok, const Task& task);

// The rows fed before turn t's answer: the prompt's last token (t = 0), or the close of the
// previous answer (its end-of-generation token already fed when `previous_ended`) and the next
// user turn through the assistant header.
std::vector<int32_t> TurnRows(const model::Tokenizer& tok, const Task& task, size_t t,
                              bool previous_ended);

// Checks the arms and budgets without running anything.
absl::Status ValidateRunOptions(const RunOptions& options);

}  // namespace glimpse::eviction::eval

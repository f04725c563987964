// Runs one task of the quality suite under the full cache and every (method, budget).
//
// One prefill per task serves every method and budget: PrefillAndEvict runs the prompt once with
// a scorer that holds all requested methods (it captures the union of their needs, scores every
// layer with each and keeps everything), then for each method and budget the cache is set to
// Select()'s kept entries of that method's scores and the continuation is scored without keeping
// it (continuation.h). Selection follows the pipeline: sinks and a recent window are always kept,
// per head, uniform schedule (PyramidKV: SnapKV's scores under the pyramid schedule). The full
// cache runs through exactly the same code as a budget of 1, so that budget reproduces it bit for
// bit.
//
// The prompt is the chat template up to the end of the first user turn; the assistant header and
// everything after it are fed after eviction, so every answer token comes from the evicted cache.
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
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::eviction::eval {

struct RunOptions {
  // Scorer names, or "pyramidkv" (SnapKV's scores, pyramid schedule), or "laq" (laq.h).
  std::vector<std::string> methods;
  std::vector<double> budgets;     // fractions of the prompt in (0, 1]
  int32_t max_answer_tokens = 16;  // per turn, end-of-generation token included
  int64_t sinks = 4;
  int64_t window = 32;  // always-kept recent window; also the observation window of window scorers
  std::string lookahead_module = {};  // the module file (.safetensors) of method "lookahead"
  int32_t laq_draft_tokens = 8;
};

// One cache content's scores on one task.
struct RunScores {
  std::string method;  // "full" for the full cache
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
  std::vector<RunScores> runs;  // methods × budgets, in the options' order
};

// InvalidArgument for an unknown method, a budget outside (0, 1], or one too small for the prompt
// (fewer entries than sinks + window). `on_run` (may be empty) is called after each cache content.
absl::StatusOr<TaskScores> RunTask(const model::Model& model, kernels::ThreadPool& pool,
                                   const Task& task, const RunOptions& options,
                                   const std::function<void()>& on_run = {});

// The rows fed before turn t's answer: the assistant header (t = 0), or the close of the previous
// answer (its end-of-generation token already fed when `previous_ended`) and the next user turn.
std::vector<int32_t> TurnRows(const model::Tokenizer& tok, const Task& task, size_t t,
                              bool previous_ended);

// Checks the methods and budgets without running anything.
absl::Status ValidateRunOptions(const RunOptions& options);

}  // namespace glimpse::eviction::eval

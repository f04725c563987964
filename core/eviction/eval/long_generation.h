// The long-generation family of `glimpse eval --long-generation`: what decode-time eviction
// (core/eviction/decode_eviction.h) costs a session whose answer comes after a long generation.
//
// A task is a single-turn task of the suite (tasks.h) told differently:
//   turn 1  the haystack, then "retell the text above in detail, at least 200 words": the model
//           generates a trace of up to trace_tokens tokens over the whole prompt;
//   turn 2  the task's question, answered greedily (max_answer_tokens) and scored (AnswerMatches).
// The full cache generates the reference trace. Every arm (method × budget in entries per head)
// prefills the same prompt evicting it to the budget (pipeline.h), then has the reference trace
// fed token by token (teacher-forced, so every arm is scored on the same text) with decode-time
// eviction every `interval` tokens, so that it never holds more than budget + interval entries
// per head; then turn 2 is prefilled over what is left and answered. Per arm:
//   KL         mean over the trace's steps of KL(full ‖ evicted) of the next-token distribution;
//   agreement  share of trace steps whose argmax is the reference token;
//   correct    turn 2's answer holds the expected answer, turn 2 fed whole over what is left;
//   with recall  the same with turn 2 run as a worker's next turn: prefilled with eviction at
//              the budget, everything evicted so far offered back as cold-page recall
//              candidates (recall.h; half the budget per head, pages of 16);
//   peak       the most entries a (layer, kv-head) held at any step (the full cache: prompt +
//              trace), the memory the arm needs;
//   overhead   the evictions' time as a share of the full cache's trace decode.
// The family is never used for training or tuning.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/runner.h"
#include "core/eviction/eval/tasks.h"
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::eviction::eval {

struct LongGenerationOptions {
  std::vector<Arm> arms;                           // methods decode-time eviction runs (no laq)
  std::vector<int64_t> budgets = {128, 256, 512};  // entries kept per (layer, kv-head)
  int64_t interval = 32;                           // fed tokens between evictions
  int32_t trace_tokens = 256;                      // turn 1's generation, at most
  int32_t max_answer_tokens = 16;  // turn 2's answer, end-of-generation token included
  std::string lookahead_module;    // learned scorers' files sit beside it (AttachLearnedFiles)
};

struct LongGenerationRun {
  std::string label;
  int64_t budget = 0;
  double kl = 0.0;
  double agreement = 0.0;
  bool correct = false;
  std::string answer;
  // Turn 2 as a worker's next turn: prefilled with eviction at the budget, recalling from
  // everything evicted so far (the prompt's and the trace's), then answered.
  bool recall_run = false;  // false for a scorer that cannot recall (H2O)
  bool recall_correct = false;
  std::string recall_answer;
  int64_t peak_entries = 0;
  int64_t evictions = 0;
  double eviction_seconds = 0.0;
};

struct LongGenerationTask {
  TaskKind kind = TaskKind::kNeedleSingle;
  uint64_t seed = 0;
  int64_t prompt_tokens = 0;
  int64_t trace_tokens = 0;  // of the reference trace
  bool full_correct = false;
  std::string full_answer;
  int64_t full_peak_entries = 0;
  double trace_seconds = 0.0;           // the full cache's trace, fed token by token
  std::vector<LongGenerationRun> runs;  // arms × budgets, arm-major
};

// The suite's kinds a long-generation task is made from (one question, answered once).
std::vector<TaskKind> LongGenerationSourceKinds();

// InvalidArgument for a task with more than one turn, no arms, a laq arm, a budget < 1 or an
// interval < 1; a method decode-time eviction cannot run is its FailedPrecondition.
// `on_run` (may be empty) is called after the reference and after each arm.
absl::StatusOr<LongGenerationTask> RunLongGenerationTask(const model::Model& model,
                                                         kernels::ThreadPool& pool,
                                                         const Task& task,
                                                         const LongGenerationOptions& options,
                                                         const std::function<void()>& on_run = {});

// A markdown table: per arm and budget, accuracy, retained share of the full cache's answers, KL,
// agreement, peak entries per head (and the full cache's) and overhead, over `tasks`.
std::string LongGenerationReport(const std::vector<LongGenerationTask>& tasks,
                                 const LongGenerationOptions& options);

}  // namespace glimpse::eviction::eval

// The multi-turn recall task of `glimpse eval --recall`: the two-turn families (tasks.h
// kTwoTurnQa, kNamesTwoTurn) run the way a serving session runs them, to show what cold-page
// recall (core/eviction/recall.h) buys.
//
// Per task and budget, twice (without and with recall), on one Session, each turn as the workers
// run it (every new token but the last prefilled with eviction, the last fed after; the budget
// eviction::SelectionFor of the method's settings and the tokens so far):
//   turn 1  the haystack and question 1, prefilled with eviction, then answered greedily; its
//           evicted entries are the session's cold tier;
//   turn 2  question 2 (about what turn 1's queries did not ask for) prefilled
//           over the evicted history with eviction again, recall offering up to
//           recall_share × budget cold entries per head; answered greedily and scored
//           (metrics.h AnswerMatches).
// The full cache (no eviction) answers the same turns as the reference. Unlike `glimpse eval`'s
// single-shot runs, turn 2 is prefilled over the evicted cache, as a decode worker would.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/tasks.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::eviction::eval {

struct RecallEvalOptions {
  // The method (its scorer must not need accumulated attention); BuiltInSettings("snapkv") when
  // the scorer is left empty.
  MethodSettings settings;
  std::vector<double> budgets = {0.1, 0.2};
  double recall_share = 0.5;        // candidates per head, as a share of its budget
  int64_t recall_page_tokens = 16;  // cold entries per summarised page
  int32_t max_answer_tokens = 16;
  std::string lookahead_module;  // for scorer "lookahead"
};

struct RecallRun {
  double budget = 1.0;
  bool recall = false;
  bool correct = false;    // turn 2's answer holds the expected number
  std::string answer;      // turn 2's answer text
  int64_t candidates = 0;  // cold entries offered back at turn 2
  int64_t recalled = 0;    // ... and kept
};

struct RecallTaskScores {
  uint64_t seed = 0;
  int64_t prompt_tokens = 0;
  bool full_correct = false;  // the full cache's turn-2 answer
  std::string full_answer;
  std::vector<RecallRun> runs;  // budgets × {without, with recall}, in that order
};

// InvalidArgument for a task without exactly two turns, an unknown method, or a budget outside
// (0, 1].
absl::StatusOr<RecallTaskScores> RunRecallTask(const model::Model& model, kernels::ThreadPool& pool,
                                               const Task& task, const RecallEvalOptions& options);

// A markdown table for one family's tasks: per budget, accuracy without and with recall, mean
// candidates and recalled.
std::string RecallReport(std::string_view family, const std::vector<RecallTaskScores>& tasks);

}  // namespace glimpse::eviction::eval

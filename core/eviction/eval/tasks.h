// The synthetic quality suite of `glimpse eval`: long-context tasks generated deterministically
// from a seed, each a haystack of filler sentences with facts planted in it and one or two
// questions whose answers are numbers stated in the haystack.
//
// Kinds (RULER-style, sized for a 135M-parameter model that must solve them with the full cache):
//   kNeedleSingle      one "secret code for the <colour> door" needle; ask for it.
//   kNeedleMulti       four such needles with distinct colours and codes; ask for one of them.
//   kVariableTracking  two variables, each set and later changed; ask for one's final value.
//   kTwoTurnQa         two needles; turn 1 asks for the first, turn 2 (unknown when the cache is
//                      evicted) asks for the second, so it needs turn-1 context eviction may drop.
// Everything (filler, facts, their depths) comes from a fixed word list and a splitmix64 stream,
// so a (kind, seed, length) triple yields the same task on every platform; no files are read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::eviction::eval {

// The synthetic kinds above; the text families of text_tasks.h (kNameInGlossary, kNameInQuotes,
// kPhraseInGlossary, kNamesTwoTurn); kCalibrationText is `glimpse tune`'s (calibration.h), never
// evaluated.
enum class TaskKind {
  kNeedleSingle,
  kNeedleMulti,
  kVariableTracking,
  kTwoTurnQa,
  kNameInGlossary,
  kNameInQuotes,
  kPhraseInGlossary,
  kNamesTwoTurn,
  kCalibrationText,
};

struct QaTurn {
  std::string question;  // the user's message of this turn (turn 1 follows the haystack)
  std::string answer;    // the expected number, as text
};

struct Task {
  TaskKind kind = TaskKind::kNeedleSingle;
  uint64_t seed = 0;
  int32_t target_tokens = 0;  // approximate prompt length the haystack was sized for
  std::string context;        // the haystack with its facts
  std::vector<QaTurn> turns;  // 1 turn, or 2 for kTwoTurnQa; the last turn is the scored one
};

// "needle_single", "needle_multi", "variable_tracking", "two_turn_qa", "name_glossary",
// "name_quotes", "phrase_glossary", "names_two_turn", "calibration_text".
std::string_view TaskKindName(TaskKind kind);
// The kinds GenerateTask makes from a seed alone.
std::vector<TaskKind> SyntheticTaskKinds();
// The evaluation suite's kinds: the synthetic ones, then the text families (not kCalibrationText).
std::vector<TaskKind> AllTaskKinds();

// One task of a kind in SyntheticTaskKinds() (others give an empty task). target_tokens >= 64;
// the haystack has max(4, (target_tokens − 48) / 10) filler sentences, so that the default
// model's chat prompt is about target_tokens long.
Task GenerateTask(TaskKind kind, uint64_t seed, int32_t target_tokens);

struct SuiteOptions {
  int32_t tasks_per_kind = 4;
  uint64_t seed = 1;
  // Task i of each kind gets lengths[i % lengths.size()] (so lengths vary within every kind).
  std::vector<int32_t> lengths = {512, 1024, 1536, 2048};
  std::vector<TaskKind> kinds = AllTaskKinds();
};

// tasks_per_kind tasks of every kind, kinds interleaved (task i of each kind, then task i + 1),
// each with its own seed derived from options.seed, kind and index. The text families read their
// files (text_tasks.h): NotFound naming the Debian package when one is missing.
absl::StatusOr<std::vector<Task>> GenerateSuite(const SuiteOptions& options);

// The `--quick` size: one task of each kind at 512 tokens (a smoke test on the real model).
SuiteOptions QuickSuiteOptions(uint64_t seed);

// The first text of `prompt` in the task: the haystack followed by turn 1's question.
std::string FirstUserMessage(const Task& task);

}  // namespace glimpse::eviction::eval

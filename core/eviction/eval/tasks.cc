#include "core/eviction/eval/tasks.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/rng.h"
#include "core/eviction/eval/text_tasks.h"

namespace glimpse::eviction::eval {
namespace {

constexpr const char* kAdjectives[] = {"quiet", "old",    "small", "green",  "bright",
                                       "cold",  "warm",   "busy",  "narrow", "wide",
                                       "tall",  "gentle", "heavy", "empty"};
constexpr const char* kNouns[] = {"farmer", "teacher", "dog",    "river",   "boat",
                                  "market", "garden",  "bridge", "village", "baker",
                                  "child",  "cart",    "lamp",   "window"};
constexpr const char* kVerbs[] = {"watches", "passes", "follows", "paints",
                                  "visits",  "cleans", "finds",   "carries"};
constexpr const char* kPlaces[] = {"hill",   "station", "harbor", "field",
                                   "church", "mill",    "school", "forest"};
constexpr const char* kColours[] = {"red", "blue", "green", "yellow", "white", "black"};
constexpr const char* kVariables[] = {"X", "Q", "Z", "K", "M", "W", "J", "P"};
// A filler sentence is ~10 tokens for SmolLM2's tokenizer; the chat template, question and facts
// add ~48 (measured: targets 512…2048 give prompts of ~500…2050 tokens).
constexpr int32_t kTokensPerSentence = 10;
constexpr int32_t kPromptOverhead = 48;

std::vector<std::string> Filler(Rng& rng, int32_t target_tokens) {
  const int32_t n = std::max(4, (target_tokens - kPromptOverhead) / kTokensPerSentence);
  std::vector<std::string> sentences;
  for (int32_t i = 0; i < n; ++i) {
    sentences.push_back(absl::StrCat("The ", rng.Pick(kAdjectives), " ", rng.Pick(kNouns), " ",
                                     rng.Pick(kVerbs), " the ", rng.Pick(kNouns), " near the ",
                                     rng.Pick(kPlaces), "."));
  }
  return sentences;
}

// Facts planted at depths chosen in [lo, hi] (fractions of the haystack); later insertions go
// after earlier ones at equal depth, so a fact's order is its order in `facts`.
struct Fact {
  std::string text;
  double lo = 0.0, hi = 1.0;
};

std::string Plant(Rng& rng, std::vector<std::string> sentences, const std::vector<Fact>& facts) {
  const int64_t n = static_cast<int64_t>(sentences.size());
  std::vector<std::pair<int64_t, std::string>> at;
  for (const Fact& f : facts) {
    at.emplace_back(rng.Between(static_cast<int64_t>(f.lo * n), static_cast<int64_t>(f.hi * n)),
                    f.text);
  }
  std::stable_sort(at.begin(), at.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [pos, text] : at) sentences.insert(sentences.begin() + pos, text);
  return absl::StrJoin(sentences, " ");
}

std::string DoorFact(const std::string& colour, int64_t code) {
  return absl::StrCat("The secret code for the ", colour, " door is ", code, ".");
}

std::string DoorQuestion(const std::string& colour, bool follow_up) {
  return absl::StrCat(follow_up ? "And what" : "What", " is the secret code for the ", colour,
                      " door?");
}

void Doors(Task& task, Rng& rng, int64_t n_doors, int64_t n_questions) {
  const std::vector<int64_t> colours = rng.Distinct(std::size(kColours), n_doors);
  std::vector<int64_t> codes;
  std::vector<Fact> facts;
  for (int64_t i = 0; i < n_doors; ++i) {
    // Distinct codes: 1000-9999 split into n_doors bands, one per door, in random band order.
    codes.push_back(1000 + rng.Between(0, 8999 / n_doors) * n_doors + i);
    facts.push_back({DoorFact(kColours[colours[i]], codes[i])});
  }
  task.context = Plant(rng, Filler(rng, task.target_tokens), facts);
  const std::vector<int64_t> asked = rng.Distinct(n_doors, n_questions);
  for (int64_t i = 0; i < n_questions; ++i) {
    task.turns.push_back(
        {DoorQuestion(kColours[colours[asked[i]]], i > 0), absl::StrCat(codes[asked[i]])});
  }
}

void Variables(Task& task, Rng& rng) {
  const std::vector<int64_t> names = rng.Distinct(std::size(kVariables), 2);
  std::vector<int64_t> values;
  while (values.size() < 4) {
    const int64_t v = rng.Between(10000, 99999);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  std::vector<Fact> facts;
  for (int i = 0; i < 2; ++i) {
    facts.push_back({absl::StrCat("Variable ", kVariables[names[i]], " is set to ", values[i], "."),
                     0.0, 0.45});
    facts.push_back(
        {absl::StrCat("Variable ", kVariables[names[i]], " is changed to ", values[2 + i], "."),
         0.55, 1.0});
  }
  task.context = Plant(rng, Filler(rng, task.target_tokens), facts);
  const int64_t asked = rng.Between(0, 1);
  task.turns.push_back(
      {absl::StrCat("What is the final value of variable ", kVariables[names[asked]], "?"),
       absl::StrCat(values[2 + asked])});
}

}  // namespace

std::string_view TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kNeedleSingle:
      return "needle_single";
    case TaskKind::kNeedleMulti:
      return "needle_multi";
    case TaskKind::kVariableTracking:
      return "variable_tracking";
    case TaskKind::kTwoTurnQa:
      return "two_turn_qa";
    case TaskKind::kNameInGlossary:
      return "name_glossary";
    case TaskKind::kNameInQuotes:
      return "name_quotes";
    case TaskKind::kPhraseInGlossary:
      return "phrase_glossary";
    case TaskKind::kNamesTwoTurn:
      return "names_two_turn";
    case TaskKind::kCalibrationText:
      return "calibration_text";
  }
  return "unknown";
}

std::vector<TaskKind> SyntheticTaskKinds() {
  return {TaskKind::kNeedleSingle, TaskKind::kNeedleMulti, TaskKind::kVariableTracking,
          TaskKind::kTwoTurnQa};
}

std::vector<TaskKind> AllTaskKinds() {
  std::vector<TaskKind> kinds = SyntheticTaskKinds();
  kinds.insert(kinds.end(), {TaskKind::kNameInGlossary, TaskKind::kNameInQuotes,
                             TaskKind::kPhraseInGlossary, TaskKind::kNamesTwoTurn});
  return kinds;
}

Task GenerateTask(TaskKind kind, uint64_t seed, int32_t target_tokens) {
  Task task;
  task.kind = kind;
  task.seed = seed;
  task.target_tokens = std::max(target_tokens, 64);
  Rng rng(seed);
  switch (kind) {
    case TaskKind::kNeedleSingle:
      Doors(task, rng, 1, 1);
      break;
    case TaskKind::kNeedleMulti:
      Doors(task, rng, 4, 1);
      break;
    case TaskKind::kVariableTracking:
      Variables(task, rng);
      break;
    case TaskKind::kTwoTurnQa:
      Doors(task, rng, 2, 2);
      break;
    default:  // made from files (text_tasks.h, calibration.h), not from a seed alone
      break;
  }
  return task;
}

absl::StatusOr<std::vector<Task>> GenerateSuite(const SuiteOptions& options) {
  const std::vector<TaskKind> synthetic = SyntheticTaskKinds();
  auto is_synthetic = [&](TaskKind kind) {
    return std::find(synthetic.begin(), synthetic.end(), kind) != synthetic.end();
  };
  std::optional<TextCorpus> corpus;
  if (!std::all_of(options.kinds.begin(), options.kinds.end(), is_synthetic)) {
    ASSIGN_OR_RETURN(corpus, TextCorpus::Load());
  }
  std::vector<Task> tasks;
  for (int32_t i = 0; i < options.tasks_per_kind; ++i) {
    for (size_t k = 0; k < options.kinds.size(); ++k) {
      const TaskKind kind = options.kinds[k];
      // The seed depends on the kind's place in AllTaskKinds(), so that choosing kinds does not
      // change the tasks of the others.
      const std::vector<TaskKind> all = AllTaskKinds();
      const uint64_t place = std::find(all.begin(), all.end(), kind) - all.begin();
      const uint64_t seed = options.seed * 1000003ull + place * 7919ull + static_cast<uint64_t>(i);
      const int32_t length =
          options.lengths.empty() ? 1024 : options.lengths[(i + place) % options.lengths.size()];
      if (is_synthetic(kind)) {
        tasks.push_back(GenerateTask(kind, seed, length));
      } else {
        ASSIGN_OR_RETURN(Task task, corpus->Generate(kind, seed, length));
        tasks.push_back(std::move(task));
      }
    }
  }
  return tasks;
}

SuiteOptions QuickSuiteOptions(uint64_t seed) {
  return SuiteOptions{.tasks_per_kind = 1, .seed = seed, .lengths = {512}};
}

std::string FirstUserMessage(const Task& task) {
  return absl::StrCat(task.context, "\n\n", task.turns.front().question);
}

}  // namespace glimpse::eviction::eval

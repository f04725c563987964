// Evaluation families over natural text that ships with Debian, whose answers are names and
// phrases rather than numbers. They are held out: nothing trains or tunes on them (LookaheadKV's
// data and `glimpse tune`'s calibration set use other texts: licences, Python sources).
//
// The haystack is real prose; one or two sentences planted in it hold the answers:
//   kNameInGlossary    WordNet noun glosses (wordnet-base: /usr/share/wordnet/data.noun) as
//                      sentences "A <word> is <definition>."; planted "The <role> was <First
//                      Last>."; asked "Who was the <role>?"; the answer is the surname.
//   kNameInQuotes      the same fact in fortune-cookie quotations (fortunes-min:
//                      /usr/share/games/fortunes/{fortunes,literature,riddles}), one per line.
//   kPhraseInGlossary  the glossary with "The <thing> was "<adjective> <noun>"."; asked "What was
//                      the <thing>?"; the answer is the two-word phrase.
//   kNamesTwoTurn      the glossary with two names of two roles; turn 1 asks one, turn 2 (after
//                      eviction) the other: what turn 1 never asked for.
// Names, roles and phrases come from fixed lists, chosen by the seed (fictional, so the model
// cannot know them); haystack sentences are drawn by the seed until the prompt holds about
// target_tokens (4 characters a token); facts sit between 10 % and 90 % of it. Deterministic for
// equal files. The default model answers 75-90 % of them with its full cache (checked when the
// families were made, 2026-11-26), the floor for measuring what eviction loses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/tasks.h"

namespace glimpse::eviction::eval {

struct TextCorpusPaths {
  std::vector<std::string> fortunes = {"/usr/share/games/fortunes/fortunes",
                                       "/usr/share/games/fortunes/literature",
                                       "/usr/share/games/fortunes/riddles"};
  std::string wordnet_nouns = "/usr/share/wordnet/data.noun";
};

class TextCorpus {
 public:
  // NotFound naming the Debian package to install when a file is missing; FailedPrecondition
  // when the files hold too few usable sentences.
  static absl::StatusOr<TextCorpus> Load(const TextCorpusPaths& paths = {});

  // A task of a text family (InvalidArgument for another kind).
  absl::StatusOr<Task> Generate(TaskKind kind, uint64_t seed, int32_t target_tokens) const;

  const std::vector<std::string>& glossary() const { return glossary_; }
  const std::vector<std::string>& quotes() const { return quotes_; }

 private:
  std::vector<std::string> glossary_;  // "A <word> is <definition>."
  std::vector<std::string> quotes_;    // one quotation per entry, whitespace collapsed
};

// Whether `kind` is one of the families above.
bool IsTextFamily(TaskKind kind);

}  // namespace glimpse::eviction::eval

#include "core/eviction/eval/text_tasks.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/rng.h"

namespace glimpse::eviction::eval {
namespace {

constexpr int32_t kCharsPerToken = 4;
constexpr int32_t kPromptOverheadTokens = 60;  // chat template and question
constexpr size_t kMinQuotes = 300;             // fortunes-min 1.99.1: ~800
constexpr size_t kMinGlossary = 5000;          // wordnet-base 3.0: ~20000

constexpr const char* kFirstNames[] = {
    "Ingrid", "Tomas",  "Amara",  "Bastien", "Leona",  "Caspar", "Mirela",   "Oskar",
    "Helena", "Dorian", "Sabine", "Evander", "Katrin", "Lucian", "Rosalind", "Matthias"};
constexpr const char* kSurnames[] = {"Valerius",  "Okafor",   "Lindqvist",   "Marchetti",
                                     "Halloran",  "Brennan",  "Castellanos", "Novak",
                                     "Abernathy", "Sorensen", "Takahashi",   "Delacroix",
                                     "Whitfield", "Moreau",   "Gallagher",   "Petrov"};
constexpr const char* kRoles[] = {
    "keeper of the old lighthouse",        "captain of the ferry Osprey",
    "founder of the river guild",          "mayor of the harbour town",
    "author of the winter almanac",        "head gardener of the abbey",
    "first teacher of the village school", "master of the northern mill"};
constexpr const char* kThings[] = {"motto of the weavers' guild", "password of the city archive",
                                   "name of the northern ferry",  "title of the mayor's first book",
                                   "name of the abbey's bell",    "watchword of the night guard"};
constexpr const char* kAdjectives[] = {"silver", "quiet",  "amber",   "northern", "crooked",
                                       "velvet", "hollow", "scarlet", "patient",  "broken"};
constexpr const char* kNouns[] = {"meadow",  "lantern", "harbour", "orchard", "compass",
                                  "thistle", "chapel",  "furnace", "ribbon",  "glacier"};

absl::StatusOr<std::string> ReadAll(const std::string& path, std::string_view package) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, " (Debian package ",
                                            std::string(package),
                                            "; tools/setup/install_deps.sh installs it)"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Words(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
}

// Fortune records ("%" lines between them), whitespace collapsed; 6 to 80 words.
void ParseFortunes(const std::string& text, std::vector<std::string>& out) {
  for (absl::string_view record : absl::StrSplit(text, "\n%\n")) {
    const std::vector<std::string> words = Words(record);
    if (words.size() >= 6 && words.size() <= 80) out.push_back(absl::StrJoin(words, " "));
  }
}

// data.noun lines "offset lex ss w_cnt word lex_id … | gloss; "examples"" as "A word is gloss.":
// plain lower-case words of 4-14 letters, glosses of 4-20 words without the word itself.
void ParseNouns(const std::string& text, std::vector<std::string>& out) {
  std::set<std::string> seen;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == ' ') continue;  // the licence header
    const size_t bar = line.find(" | ");
    if (bar == absl::string_view::npos) continue;
    const std::vector<std::string> fields = Words(line.substr(0, bar));
    if (fields.size() < 6) continue;
    const std::string& word = fields[4];
    const bool plain =
        std::all_of(word.begin(), word.end(), [](char c) { return c >= 'a' && c <= 'z'; });
    if (!plain || word.size() < 4 || word.size() > 14 || !seen.insert(word).second) continue;
    std::string gloss(line.substr(bar + 3));
    if (const size_t cut = gloss.find_first_of(";\""); cut != std::string::npos) {
      gloss.resize(cut);
    }
    const std::vector<std::string> words = Words(gloss);
    if (words.size() < 4 || words.size() > 20) continue;
    gloss = absl::StrJoin(words, " ");
    if (absl::AsciiStrToLower(gloss).find(word) != std::string::npos) continue;
    const bool vowel = std::string_view("aeiou").find(word[0]) != std::string_view::npos;
    out.push_back(absl::StrCat(vowel ? "An " : "A ", word, " is ", gloss, "."));
  }
}

// Sentences drawn without repetition until they hold `chars` characters, with `facts` planted
// at distinct places between 10 % and 90 % of them, joined by `separator`.
std::string Haystack(const std::vector<std::string>& pool, Rng& rng, int64_t chars,
                     const std::vector<std::string>& facts, const char* separator) {
  std::vector<std::string> sentences;
  std::set<int64_t> used;
  int64_t length = 0;
  while (length < chars && used.size() < pool.size()) {
    const int64_t i = rng.Between(0, static_cast<int64_t>(pool.size()) - 1);
    if (!used.insert(i).second) continue;
    sentences.push_back(pool[i]);
    length += static_cast<int64_t>(pool[i].size()) + 1;
  }
  const int64_t n = static_cast<int64_t>(sentences.size());
  const int64_t lo = n / 10, hi = std::max(lo + static_cast<int64_t>(facts.size()), n * 9 / 10);
  std::vector<int64_t> places = rng.Distinct(hi - lo, static_cast<int64_t>(facts.size()));
  std::sort(places.rbegin(), places.rend());  // insert from the back: earlier places stay put
  for (size_t f = 0; f < facts.size(); ++f) {
    sentences.insert(sentences.begin() + lo + places[f], facts[f]);
  }
  return absl::StrJoin(sentences, separator);
}

struct Name {
  std::string full, surname;
};

Name PickName(Rng& rng, const std::string& avoid_surname) {
  while (true) {
    const std::string surname = rng.Pick(kSurnames);
    if (surname == avoid_surname) continue;
    return {absl::StrCat(rng.Pick(kFirstNames), " ", surname), surname};
  }
}

}  // namespace

bool IsTextFamily(TaskKind kind) {
  return kind == TaskKind::kNameInGlossary || kind == TaskKind::kNameInQuotes ||
         kind == TaskKind::kPhraseInGlossary || kind == TaskKind::kNamesTwoTurn;
}

absl::StatusOr<TextCorpus> TextCorpus::Load(const TextCorpusPaths& paths) {
  TextCorpus corpus;
  for (const std::string& path : paths.fortunes) {
    ASSIGN_OR_RETURN(const std::string text, ReadAll(path, "fortunes-min"));
    ParseFortunes(text, corpus.quotes_);
  }
  ASSIGN_OR_RETURN(const std::string nouns, ReadAll(paths.wordnet_nouns, "wordnet-base"));
  ParseNouns(nouns, corpus.glossary_);
  if (corpus.quotes_.size() < kMinQuotes || corpus.glossary_.size() < kMinGlossary) {
    return absl::FailedPreconditionError(absl::StrCat(
        "too few usable sentences: ", corpus.quotes_.size(), " quotations and ",
        corpus.glossary_.size(), " definitions (want ", kMinQuotes, " and ", kMinGlossary, ")"));
  }
  return corpus;
}

absl::StatusOr<Task> TextCorpus::Generate(TaskKind kind, uint64_t seed,
                                          int32_t target_tokens) const {
  if (!IsTextFamily(kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(TaskKindName(kind)), " is not a text family"));
  }
  Task task;
  task.kind = kind;
  task.seed = seed;
  task.target_tokens = std::max(target_tokens, 2 * kPromptOverheadTokens);
  const int64_t chars = int64_t{task.target_tokens - kPromptOverheadTokens} * kCharsPerToken;
  Rng rng(seed);
  std::vector<std::string> facts;
  if (kind == TaskKind::kPhraseInGlossary) {
    const std::string thing = rng.Pick(kThings);
    const std::string phrase = absl::StrCat(rng.Pick(kAdjectives), " ", rng.Pick(kNouns));
    facts.push_back(absl::StrCat("The ", thing, " was \"", phrase, "\"."));
    task.turns.push_back({absl::StrCat("What was the ", thing, "?"), phrase});
  } else {
    const int64_t asked = kind == TaskKind::kNamesTwoTurn ? 2 : 1;
    const std::vector<int64_t> roles = rng.Distinct(std::size(kRoles), asked);
    std::string previous;
    for (int64_t r = 0; r < asked; ++r) {
      const Name name = PickName(rng, previous);
      previous = name.surname;
      facts.push_back(absl::StrCat("The ", kRoles[roles[r]], " was ", name.full, "."));
      task.turns.push_back(
          {absl::StrCat(r == 0 ? "Who" : "And who", " was the ", kRoles[roles[r]], "?"),
           name.surname});
    }
  }
  const bool quotes = kind == TaskKind::kNameInQuotes;
  task.context = Haystack(quotes ? quotes_ : glossary_, rng, chars, facts, quotes ? "\n" : " ");
  return task;
}

}  // namespace glimpse::eviction::eval

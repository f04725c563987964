#include "core/eviction/eval/calibration.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/fnv1a.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/rng.h"
#include "zlib.h"

namespace glimpse::eviction::eval {
namespace {

constexpr int32_t kPromptOverhead = 64;  // chat template and instruction, in tokens
constexpr size_t kMinWordLetters = 7;
constexpr size_t kMaxSourceBytes = size_t{64} << 20;  // one file's text

struct Source {
  std::string path;
  std::string text;
  std::vector<std::string> lines;    // each with its '\n'
  std::vector<int64_t> line_tokens;  // tokens of each line, encoded alone
  int64_t tokens = 0;
};

// The source's files: itself, or a directory's regular files (not links), in name order.
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& source) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(source, ec)) return std::vector<std::string>{source};
  if (!std::filesystem::is_directory(source, ec)) {
    return absl::NotFoundError(absl::StrCat("calibration source ", source, " does not exist"));
  }
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(source, ec)) {
    if (entry.is_regular_file() && !entry.is_symlink()) found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// A file's text; a gzip file (most of Debian's man and info pages, and /usr/share/doc) is
// decompressed. FailedPrecondition when it is not text (it holds a NUL byte: an image, an object).
absl::StatusOr<std::string> ReadText(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");  // reads a file that is not gzip as it is
  if (in == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot read calibration source ", path));
  }
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(in, buffer, sizeof(buffer))) > 0 && text.size() <= kMaxSourceBytes) {
    text.append(buffer, static_cast<size_t>(n));
  }
  // Z_BUF_ERROR: the last read ended inside a gzip stream (a truncated file, or the cap below).
  const int closed = gzclose(in);
  if (text.size() > kMaxSourceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("calibration source ", path, " holds over ",
                                                   kMaxSourceBytes >> 20, " MiB of text"));
  }
  if (n < 0 || closed != Z_OK) {
    return absl::DataLossError(absl::StrCat("calibration source ", path, " is corrupt"));
  }
  if (text.find('\0') != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat("calibration source ", path, " is not text"));
  }
  return text;
}

absl::StatusOr<Source> ReadSource(const model::Tokenizer& tok, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadText(path));
  Source s{.path = path, .text = std::move(text)};
  for (absl::string_view line : absl::StrSplit(s.text, absl::ByChar('\n'))) {
    s.lines.push_back(absl::StrCat(line, "\n"));
    s.line_tokens.push_back(static_cast<int64_t>(tok.Encode(s.lines.back()).size()));
    s.tokens += s.line_tokens.back();
  }
  return s;
}

// Whole lines from `first` until they hold `tokens` tokens (or the file ends).
std::string Excerpt(const Source& s, size_t first, int64_t tokens) {
  std::string out;
  int64_t have = 0;
  for (size_t i = first; i < s.lines.size() && have < tokens; ++i) {
    out += s.lines[i];
    have += s.line_tokens[i];
  }
  return out;
}

// A word of >= 7 letters occurring once in `text`, starting in its middle 80 %; "" when none.
std::string RareWord(const std::string& text, Rng& rng) {
  std::map<std::string, std::pair<int, size_t>> words;  // word → (count, first offset)
  for (size_t i = 0; i < text.size();) {
    if (!std::isalpha(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && std::isalpha(static_cast<unsigned char>(text[j]))) ++j;
    auto& [count, offset] = words[text.substr(i, j - i)];
    if (count++ == 0) offset = i;
    i = j;
  }
  std::vector<std::string> candidates;
  for (const auto& [word, seen] : words) {
    const double at = static_cast<double>(seen.second) / static_cast<double>(text.size());
    if (seen.first == 1 && word.size() >= kMinWordLetters && at >= 0.1 && at <= 0.9) {
      candidates.push_back(word);
    }
  }
  if (candidates.empty()) return "";
  return candidates[rng.Between(0, static_cast<int64_t>(candidates.size()) - 1)];
}

// Task i's source: sources rotate with i as instructions do (i mod 3); where their number is a
// multiple of 3 they shift by one every round, or each source would meet one instruction only.
size_t SourceOf(int32_t i, size_t sources) {
  const size_t round = static_cast<size_t>(i) / sources;
  return (static_cast<size_t>(i) + (sources % 3 == 0 ? round : 0)) % sources;
}

std::string Instruction(int32_t i, const std::string& word) {
  if (word.empty() || i % 3 == 0) return "Summarise the text above in two sentences.";
  if (i % 3 == 1) {
    return absl::StrCat("Quote the sentence of the text above that contains the word \"", word,
                        "\".");
  }
  return absl::StrCat("What does the text above say about \"", word, "\"?");
}

}  // namespace

absl::StatusOr<CalibrationSet> MakeCalibrationSet(const model::Tokenizer& tok,
                                                  const CalibrationOptions& options) {
  if (options.tasks < 1 || options.lengths.empty()) {
    return absl::InvalidArgumentError("calibration needs at least one task and one length");
  }
  if (options.sources.empty()) return absl::InvalidArgumentError("calibration needs a source");
  std::vector<std::vector<Source>> groups;  // [source][file]
  CalibrationSet set;
  set.provenance = {{"seed", options.seed}, {"lengths", options.lengths}, {"sources", {}}};
  for (const std::string& source : options.sources) {
    ASSIGN_OR_RETURN(const std::vector<std::string> files, ListFiles(source));
    groups.emplace_back();
    for (const std::string& path : files) {
      absl::StatusOr<Source> read = ReadSource(tok, path);
      // A directory's file that is not text (an image beside the manuals) is passed over; a file
      // named as a source is not.
      if (absl::IsFailedPrecondition(read.status()) && path != source) continue;
      ASSIGN_OR_RETURN(Source s, std::move(read));
      set.provenance["sources"].push_back(
          {{"path", path}, {"bytes", s.text.size()}, {"fnv1a64", absl::StrCat(Fnv1a64(s.text))}});
      groups.back().push_back(std::move(s));
    }
  }
  Rng rng(options.seed * 0x9E3779B97F4A7C15ull + 17);
  for (int32_t i = 0; i < options.tasks; ++i) {
    const int32_t target = options.lengths[i % options.lengths.size()];
    const int64_t body = std::max<int64_t>(target - kPromptOverhead, 16);
    const size_t source = SourceOf(i, groups.size());
    std::vector<const Source*> fits;
    for (const Source& s : groups[source]) {
      if (s.tokens >= body) fits.push_back(&s);
    }
    if (fits.empty()) {
      return absl::NotFoundError(absl::StrCat("no file of calibration source ",
                                              options.sources[source], " holds ", body,
                                              " tokens (target ", target, ")"));
    }
    const Source& s = *fits[rng.Between(0, static_cast<int64_t>(fits.size()) - 1)];
    // The last start line that still leaves `body` tokens.
    size_t last_start = s.lines.size() - 1;
    for (int64_t after = 0; last_start > 0; --last_start) {
      after += s.line_tokens[last_start];
      if (after >= body) break;
    }
    Task task;
    task.kind = TaskKind::kCalibrationText;
    task.seed = options.seed * 1000003ull + static_cast<uint64_t>(i);
    task.target_tokens = target;
    task.context = Excerpt(s, rng.Between(0, static_cast<int64_t>(last_start)), body);
    task.turns.push_back({Instruction(i, RareWord(task.context, rng)), ""});
    set.tasks.push_back(std::move(task));
  }
  return set;
}

}  // namespace glimpse::eviction::eval

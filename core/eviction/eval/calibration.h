// The calibration set of `glimpse tune` (tune.h): excerpts of texts that ship with Debian, by
// default the licences in /usr/share/common-licenses (legal prose) and the Python 3.11 standard
// library's modules (code and docstrings), each followed by one instruction. Tuning
// measures how far each method's evicted cache moves the model from its own full-cache answer
// (KL, teacher-forced), so no expected answers are needed. The set shares no family with the
// evaluation suite (tasks.h), which stays held out: nothing that `glimpse eval` reports was seen
// while choosing the settings.
//
// Files are read as text, gzip files decompressed (Debian's man and info pages); a directory's
// files that are not text (a NUL byte) are passed over, a named one is refused.
//
// Task i: a source file from source i mod S of the S sources — so every kind of text gets its
// share; where S is a multiple of 3, shifted by one more every S tasks, so that every source
// meets every instruction — chosen by the seed among that source's files with at least the
// target's tokens, a run of whole lines from a random start line until the excerpt reaches
// target − 64 tokens, and one instruction, rotating:
//   0  "Summarise the text above in two sentences."
//   1  "Quote the sentence of the text above that contains the word "W"."
//   2  "What does the text above say about "W"?"
// W is a word of at least 7 letters that occurs once in the excerpt, in its middle 80 % (the
// summary instruction stands in when there is none). Deterministic for equal files and options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/tasks.h"
#include "core/model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction::eval {

struct CalibrationOptions {
  // Files, or directories whose regular files (not symbolic links) are taken, in name order;
  // task i draws from source i mod sources.size() (shifted where that is a multiple of 3).
  std::vector<std::string> sources = {"/usr/share/common-licenses", "/usr/lib/python3.11"};
  int32_t tasks = 16;
  uint64_t seed = 1;
  std::vector<int32_t> lengths = {1024, 1280, 1536};  // target prompt tokens, cycled over tasks
};

struct CalibrationSet {
  std::vector<Task> tasks;  // kind TaskKind::kCalibrationText, no expected answers
  // {"sources": [{"path", "bytes", "fnv1a64"}], "seed", "lengths"}: what tune's profile records.
  nlohmann::json provenance;
};

// NotFound when a source is missing or no file holds enough tokens for a target length;
// FailedPrecondition when a file named as a source is not text; DataLoss for a corrupt gzip file;
// InvalidArgument for tasks < 1, no lengths, or a file of over 64 MiB of text.
absl::StatusOr<CalibrationSet> MakeCalibrationSet(const model::Tokenizer& tok,
                                                  const CalibrationOptions& options);

}  // namespace glimpse::eviction::eval

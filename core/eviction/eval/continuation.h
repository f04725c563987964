// Continuations run against whatever a Session's cache holds, without keeping them: every call
// goes through Session::ForwardEmbeddings with keep_entries = false, so cache and position are as
// before afterwards. One prefilled session can then be evaluated under many cache contents (the
// full cache, each method's kept subset at each budget), all continuing at the same positions.
//
// A continuation is a Script: the tokens fed after the prompt (assistant header, later turns) and
// the reference answer of each turn, as the full cache produced them greedily. Free-running an
// evicted cache is speculative decoding: one teacher-forced pass over the script verifies the
// reference tokens the cache agrees with; after a disagreement a draft is verified again in one
// call (another run's answer that went the same way, else the rest of the reference kept aligned
// by position), and so on. A call re-runs the turn's rows (a few dozen), cheap next to the prompt.
// Drafts only decide how many tokens one call may accept: each token is still the argmax of the
// logits after exactly the tokens before it, so the result is the cache's greedy decode.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/sequence.h"

namespace glimpse::eviction::eval {

struct Script {
  std::vector<int32_t> tokens;  // every token after the prompt: fed rows and reference answers
  // Per turn, the reference answer is tokens[answer_begin, answer_end): the greedy tokens and, when
  // generation stopped on one, the end-of-generation token.
  std::vector<int64_t> answer_begin, answer_end;
};

// Logits for `tokens` fed after the session's cache: [tokens.size(), vocab] with all_rows, else
// [vocab] of the last row. The session is unchanged afterwards.
absl::StatusOr<std::vector<float>> PeekLogits(model::Sequence& session,
                                              std::span<const int32_t> tokens, bool all_rows);

// Greedy decode of up to max_tokens after `context` (tokens after the prompt), stopping after an
// end-of-generation token (which is included). `drafts` (may be empty) are speculations; `verified`
// holds the logits of rows [context.size() − 1, context.size() + drafts[0].size()) of a pass that
// fed context + drafts[0], or is empty (then the first call computes what it needs).
absl::StatusOr<std::vector<int32_t>> GreedyContinuation(
    model::Sequence& session, std::span<const int32_t> context,
    std::span<const std::vector<int32_t>> drafts, std::span<const float> verified,
    int32_t max_tokens);

// What one cache content scores against the script.
struct ContinuationScores {
  std::vector<std::vector<int32_t>> answers;   // per turn, greedy tokens (history fixed to the
                                               // script's reference answers of earlier turns)
  std::vector<std::vector<double>> log_probs;  // per answer row of the script, log softmax
};

// Runs the session's current cache through the script: one teacher-forced pass (log_probs of the
// rows that predict each reference answer token) and, with `answers`, a free-running greedy answer
// per turn (else `answers` stays empty). seen[t] (optional) holds other runs' answers to turn t,
// used as extra drafts.
absl::StatusOr<ContinuationScores> ScoreContinuation(
    model::Sequence& session, const Script& script, int32_t max_tokens,
    const std::vector<std::vector<std::vector<int32_t>>>& seen = {}, bool answers = true);

}  // namespace glimpse::eviction::eval

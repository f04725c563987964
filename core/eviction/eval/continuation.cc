#include "core/eviction/eval/continuation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/metrics.h"

namespace glimpse::eviction::eval {

absl::StatusOr<std::vector<float>> PeekLogits(model::Sequence& session,
                                              std::span<const int32_t> tokens, bool all_rows) {
  const int32_t vocab = session.model().config().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is out of range"));
    }
  }
  std::vector<float> rows(tokens.size() * session.model().config().hidden);
  session.model().EmbedTokens(tokens, rows.data());
  model::EmbeddingsCall call;
  call.keep_entries = false;
  call.all_logits = all_rows;
  return session.ForwardEmbeddings(rows, call);
}

namespace {

// The speculation after `out`: the longest draft that starts with `out` (another run's answer
// that went the same way), else the first draft from position out.size() on (kept aligned, so a
// substitution such as "… is 1201." vs "… is 1234." re-verifies the tokens after it).
std::span<const int32_t> Rest(std::span<const std::vector<int32_t>> drafts,
                              const std::vector<int32_t>& out) {
  std::span<const int32_t> best;
  for (const std::vector<int32_t>& d : drafts) {
    if (d.size() > out.size() + best.size() && std::equal(out.begin(), out.end(), d.begin())) {
      best = std::span<const int32_t>(d).subspan(out.size());
    }
  }
  if (best.empty() && !drafts.empty() && out.size() < drafts[0].size()) {
    best = std::span<const int32_t>(drafts[0]).subspan(out.size());
  }
  return best;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> GreedyContinuation(
    model::Sequence& session, std::span<const int32_t> context,
    std::span<const std::vector<int32_t>> drafts, std::span<const float> verified,
    int32_t max_tokens) {
  const model::Tokenizer& tok = session.model().tokenizer();
  const int64_t vocab = session.model().config().vocab_size;
  std::vector<int32_t> out;
  std::vector<float> logits(verified.begin(), verified.end());
  std::span<const int32_t> rest;
  if (!verified.empty() && !drafts.empty()) rest = drafts[0];
  std::vector<int32_t> rows;
  while (true) {
    // Row i of logits predicts the token after context + out + rest[0, i).
    if (logits.empty()) {
      rest = Rest(drafts, out);
      rows.assign(context.begin(), context.end());
      rows.insert(rows.end(), out.begin(), out.end());
      rows.insert(rows.end(), rest.begin(), rest.end());
      ASSIGN_OR_RETURN(logits, PeekLogits(session, rows, !rest.empty()));
      logits.erase(logits.begin(), logits.end() - (rest.size() + 1) * vocab);
    }
    for (size_t i = 0; i <= rest.size(); ++i) {
      const int32_t token = Argmax(std::span<const float>(logits).subspan(i * vocab, vocab));
      out.push_back(token);
      if (tok.IsEndOfGeneration(token) || static_cast<int32_t>(out.size()) >= max_tokens) {
        return out;
      }
      if (i == rest.size() || token != rest[i]) break;
    }
    logits.clear();
  }
}

absl::StatusOr<ContinuationScores> ScoreContinuation(
    model::Sequence& session, const Script& script, int32_t max_tokens,
    const std::vector<std::vector<std::vector<int32_t>>>& seen, bool answers) {
  const int64_t vocab = session.model().config().vocab_size;
  ASSIGN_OR_RETURN(std::vector<float> logits, PeekLogits(session, script.tokens, true));
  ContinuationScores scores;
  const std::span<const int32_t> all(script.tokens);
  for (size_t t = 0; t < script.answer_begin.size(); ++t) {
    const int64_t begin = script.answer_begin[t], end = script.answer_end[t];
    for (int64_t row = begin - 1; row < end - 1; ++row) {
      scores.log_probs.push_back(
          LogSoftmax(std::span<const float>(logits).subspan(row * vocab, vocab)));
    }
    if (!answers) continue;
    std::vector<std::vector<int32_t>> drafts = {{all.begin() + begin, all.begin() + end}};
    if (t < seen.size()) drafts.insert(drafts.end(), seen[t].begin(), seen[t].end());
    const std::span<const float> verified =
        std::span<const float>(logits).subspan((begin - 1) * vocab, (end - begin + 1) * vocab);
    ASSIGN_OR_RETURN(std::vector<int32_t> answer,
                     GreedyContinuation(session, all.first(begin), drafts, verified, max_tokens));
    scores.answers.push_back(std::move(answer));
  }
  return scores;
}

}  // namespace glimpse::eviction::eval

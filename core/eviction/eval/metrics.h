// Scores of one evicted run against the full cache, on hand-checkable definitions:
//   AnswerMatches     task accuracy: the expected number or word occurs in the answer as a whole
//                     one (not inside a longer run of digits or letters), letters compared
//                     without case: "The code is 4721." matches 4721, "Mark Twain's" Twain.
//   GreedyAgreement   the fraction of the first n = min(limit, |reference|) reference tokens that
//                     the evicted run produced at the same position (a missing token disagrees).
//   KlDivergence      KL(P ‖ Q) = Σ_v P(v)·(log P(v) − log Q(v)) of two softmax distributions
//                     given as logits, in nats, computed in double; 0 for identical logits.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"

namespace glimpse::eviction::eval {

// An answer's tokens as text, always valid UTF-8: an answer cut at its token limit may end inside
// a character, and a model may emit bytes that form none; each such byte reads as U+FFFD
// (model::ValidUtf8), so reports (JSON) can hold every answer.
absl::StatusOr<std::string> DecodeAnswer(const model::Tokenizer& tok,
                                         const std::vector<int32_t>& tokens);

bool AnswerMatches(std::string_view answer, std::string_view expected);

double GreedyAgreement(std::span<const int32_t> tokens, std::span<const int32_t> reference,
                       int64_t limit);

// log softmax of logits [vocab], in double.
std::vector<double> LogSoftmax(std::span<const float> logits);

// KL(P ‖ Q) from log-probabilities of equal size.
double KlDivergence(std::span<const double> log_p, std::span<const double> log_q);

// The index of the largest logit, the lowest on ties (the sampler's greedy rule).
int32_t Argmax(std::span<const float> logits);

}  // namespace glimpse::eviction::eval

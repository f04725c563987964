#include "core/model/generator.h"

#include <chrono>

#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"

namespace glimpse::model {

absl::StatusOr<GenerationResult> Generate(Sequence& sequence, Sampler& sampler,
                                          std::span<const int32_t> prompt, int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, sequence.Forward(prompt));
  const double prefill_seconds = SecondsSince(start);
  ASSIGN_OR_RETURN(GenerationResult result,
                   DecodeFrom(sequence, sampler, std::move(logits), max_tokens, [&](int32_t token) {
                     if (on_token) on_token(token);
                     return true;
                   }));
  result.prefill_seconds = prefill_seconds;
  return result;
}

DecodeState::DecodeState(const Sequence& sequence, Sampler& sampler, int32_t max_tokens)
    : DecodeState(
          sequence.model().tokenizer(),
          [&sequence] { return sequence.next_position() >= sequence.max_context(); }, sampler,
          max_tokens) {}

DecodeState::DecodeState(const Tokenizer& tokenizer, std::function<bool()> full, Sampler& sampler,
                         int32_t max_tokens)
    : tokenizer_(tokenizer), full_(std::move(full)), sampler_(sampler), max_tokens_(max_tokens) {
  done_ = max_tokens_ <= 0;
}

std::optional<int32_t> DecodeState::Next(std::span<const float> logits,
                                         const std::function<bool(int32_t)>& accept) {
  if (done_) return std::nullopt;
  const int32_t token = sampler_.Sample(logits);
  result_.unfed_token = token;
  done_ = true;
  if (tokenizer_.IsEndOfGeneration(token)) {
    result_.stop = StopReason::kEndOfGeneration;
    return std::nullopt;
  }
  result_.tokens.push_back(token);
  if (accept && !accept(token)) {
    result_.stop = StopReason::kCancelled;
    return std::nullopt;
  }
  if (static_cast<int32_t>(result_.tokens.size()) == max_tokens_) return std::nullopt;
  if (full_()) {
    result_.stop = StopReason::kContextFull;
    return std::nullopt;
  }
  done_ = false;
  return token;
}

absl::StatusOr<GenerationResult> DecodeFrom(Sequence& sequence, Sampler& sampler,
                                            std::vector<float> logits, int32_t max_tokens,
                                            const std::function<bool(int32_t)>& on_token,
                                            DecodeObserver* observer) {
  const auto start = std::chrono::steady_clock::now();
  DecodeState state(sequence, sampler, max_tokens);
  while (std::optional<int32_t> token = state.Next(logits, on_token)) {
    const int32_t next[] = {*token};
    ASSIGN_OR_RETURN(logits, sequence.Forward(next, /*all_logits=*/false, observer));
    if (observer != nullptr) RETURN_IF_ERROR(observer->AfterToken(sequence));
  }
  GenerationResult result = std::move(state.result());
  result.decode_seconds = SecondsSince(start);
  return result;
}

}  // namespace glimpse::model

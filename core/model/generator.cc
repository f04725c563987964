#include "core/model/generator.h"

#include <chrono>

#include "core/common/status_macros.h"

namespace glimpse::model {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(Session& session, Sampler& sampler,
                                          std::span<const int32_t> prompt, int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(prompt));
  const double prefill_seconds = SecondsSince(start);
  ASSIGN_OR_RETURN(GenerationResult result,
                   DecodeFrom(session, sampler, std::move(logits), max_tokens, [&](int32_t token) {
                     if (on_token) on_token(token);
                     return true;
                   }));
  result.prefill_seconds = prefill_seconds;
  return result;
}

absl::StatusOr<GenerationResult> DecodeFrom(Session& session, Sampler& sampler,
                                            std::vector<float> logits, int32_t max_tokens,
                                            const std::function<bool(int32_t)>& on_token) {
  GenerationResult result;
  const Tokenizer& tokenizer = session.model().tokenizer();
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int32_t>(result.tokens.size()) < max_tokens) {
    const int32_t token = sampler.Sample(logits);
    result.unfed_token = token;
    if (tokenizer.IsEndOfGeneration(token)) {
      result.stop = StopReason::kEndOfGeneration;
      break;
    }
    result.tokens.push_back(token);
    if (!on_token(token)) {
      result.stop = StopReason::kCancelled;
      break;
    }
    if (static_cast<int32_t>(result.tokens.size()) == max_tokens) break;
    if (session.next_position() >= session.max_context()) {
      result.stop = StopReason::kContextFull;
      break;
    }
    const int32_t next[] = {token};
    ASSIGN_OR_RETURN(logits, session.Forward(next));
  }
  result.decode_seconds = SecondsSince(start);
  return result;
}

}  // namespace glimpse::model

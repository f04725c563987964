#include "core/model/cuda/device_generate.h"

#include <chrono>
#include <vector>

#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"

namespace glimpse::model::cuda {

absl::StatusOr<GenerationResult> Generate(DeviceRunner& runner, DeviceSequence& seq,
                                          Sampler& sampler, std::span<const int32_t> prompt,
                                          int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, runner.Prefill(seq, prompt));
  const double prefill_seconds = SecondsSince(start);
  const auto decode_start = std::chrono::steady_clock::now();
  DecodeState state(
      runner.model().model().tokenizer(), [&seq] { return seq.length() >= seq.capacity(); },
      sampler, max_tokens);
  DeviceSequence* const seqs[] = {&seq};
  while (std::optional<int32_t> token = state.Next(logits, [&](int32_t t) {
    if (on_token) on_token(t);
    return true;
  })) {
    const int32_t next[] = {*token};
    ASSIGN_OR_RETURN(logits, runner.Decode(seqs, next));
  }
  GenerationResult result = std::move(state.result());
  result.prefill_seconds = prefill_seconds;
  result.decode_seconds = SecondsSince(decode_start);
  return result;
}

}  // namespace glimpse::model::cuda

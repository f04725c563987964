// The decode loop shared by the CLI and (later) the decode worker: feed a prompt, then sample one
// token at a time until an end-of-generation token, the token limit, or the context limit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/sampler.h"
#include "core/model/sequence.h"

namespace glimpse::model {

enum class StopReason { kEndOfGeneration, kMaxTokens, kContextFull, kCancelled };

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens, excluding a final end-of-generation token
  StopReason stop = StopReason::kMaxTokens;
  // The last sampled token (the end-of-generation token, or the last of `tokens`). It is NOT yet in
  // the sequence: a conversation that continues feeds it first. -1 when nothing was sampled.
  int32_t unfed_token = -1;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// Runs `prompt` (appended to whatever the sequence holds) and generates up to `max_tokens`.
// `on_token` (may be empty) sees each generated token as it is produced. Errors come from the
// sequence (token out of range, prompt beyond the context) before anything is generated.
absl::StatusOr<GenerationResult> Generate(Sequence& sequence, Sampler& sampler,
                                          std::span<const int32_t> prompt, int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token = {});

// One sequence's decoding, a token at a time, for callers that run the forward passes themselves
// (a batched engine): Next() samples from the last logits and says whether the token must be fed
// (another pass) or the sequence stopped. DecodeFrom is this loop with the sequence's own passes.
class DecodeState {
 public:
  DecodeState(const Sequence& sequence, Sampler& sampler, int32_t max_tokens);
  // For sequences that are not Sequences (the CUDA runtime's): `full()` says whether the sequence
  // can take no more tokens. `tokenizer` and `full` must outlive the state.
  DecodeState(const Tokenizer& tokenizer, std::function<bool()> full, Sampler& sampler,
              int32_t max_tokens);
  // Samples the next token from `logits`; returns it when it is to be fed (at the sequence's next
  // position), nullopt when the sequence stopped (result().stop says why). `accept(token)` (may be
  // empty) sees each generated token; false stops after it (kCancelled).
  std::optional<int32_t> Next(std::span<const float> logits,
                              const std::function<bool(int32_t)>& accept = {});
  bool done() const { return done_; }
  const GenerationResult& result() const { return result_; }
  GenerationResult& result() { return result_; }

 private:
  const Tokenizer& tokenizer_;
  std::function<bool()> full_;
  Sampler& sampler_;
  const int32_t max_tokens_;
  GenerationResult result_;
  bool done_ = false;
};

// What runs beside one sequence's decoding (decode-time eviction,
// core/eviction/decode_eviction.h): as a LayerObserver it sees every layer of each fed token's
// pass; AfterToken then acts on the sequence before the next token's pass.
class DecodeObserver : public LayerObserver {
 public:
  // After a fed token's pass (its K/V are in the cache), before the token sampled from its
  // logits is fed. An error stops the sequence with that error.
  virtual absl::Status AfterToken(Sequence& sequence) = 0;
};

// The decode half of Generate, for a caller that ran the prompt itself (e.g. prefill with
// eviction): samples from `logits` (the prompt's last-token logits) onwards. `on_token` returning
// false stops the loop after that token (StopReason::kCancelled); like the last token of any
// result it is in `tokens` and not yet fed (unfed_token). `observer` (may be null, not owned)
// sees each fed token.
absl::StatusOr<GenerationResult> DecodeFrom(Sequence& sequence, Sampler& sampler,
                                            std::vector<float> logits, int32_t max_tokens,
                                            const std::function<bool(int32_t)>& on_token,
                                            DecodeObserver* observer = nullptr);

}  // namespace glimpse::model

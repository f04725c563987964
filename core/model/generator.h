// The decode loop shared by the CLI and (later) the decode worker: feed a prompt, then sample one
// token at a time until an end-of-generation token, the token limit, or the context limit.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/sampler.h"
#include "core/model/session.h"

namespace glimpse::model {

enum class StopReason { kEndOfGeneration, kMaxTokens, kContextFull, kCancelled };

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens, excluding a final end-of-generation token
  StopReason stop = StopReason::kMaxTokens;
  // The last sampled token (the end-of-generation token, or the last of `tokens`). It is NOT yet in
  // the session: a conversation that continues feeds it first. -1 when nothing was sampled.
  int32_t unfed_token = -1;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// Runs `prompt` (appended to whatever the session holds) and generates up to `max_tokens`.
// `on_token` (may be empty) sees each generated token as it is produced. Errors come from the
// session (token out of range, prompt beyond the context) before anything is generated.
absl::StatusOr<GenerationResult> Generate(Session& session, Sampler& sampler,
                                          std::span<const int32_t> prompt, int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token = {});

// The decode half of Generate, for a caller that ran the prompt itself (e.g. prefill with
// eviction): samples from `logits` (the prompt's last-token logits) onwards. `on_token` returning
// false stops the loop after that token (StopReason::kCancelled); like the last token of any
// result it is in `tokens` and not yet fed (unfed_token).
absl::StatusOr<GenerationResult> DecodeFrom(Session& session, Sampler& sampler,
                                            std::vector<float> logits, int32_t max_tokens,
                                            const std::function<bool(int32_t)>& on_token);

}  // namespace glimpse::model

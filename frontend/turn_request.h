// Validating a Generate request and resolving it into one turn: the conversation's token ids, the
// sampling parameters with the frontend's defaults filled in, and the eviction policy with its
// canonical string (part of the namespace key, so states written under one policy are never read
// under another). Every error is InvalidArgument naming the field and the value. Pure functions;
// no RPCs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/model/tokenizer.h"
#include "glimpse/v1/frontend.pb.h"

namespace glimpse::frontend {

struct TurnLimits {
  int32_t vocab_size = 0;                         // token ids in [0, vocab_size)
  int32_t context_length = 0;                     // prompt + max_tokens must fit
  int64_t max_prompt_tokens = 0;                  // <= context_length - 1
  int32_t default_max_tokens = 256;               // sampling.max_tokens 0
  int32_t max_output_tokens = 4096;               // the largest max_tokens a request may ask
  absl::Duration max_tool_hint = absl::Hours(1);  // expected_tool_ms / observed_duration_ms bound
  v1::EvictionPolicy default_policy;              // a request without a policy gets this
};

struct Turn {
  std::vector<int32_t> tokens;  // the whole conversation, ending with this turn's prompt
  v1::SamplingParams sampling;  // max_tokens > 0; top_p in (0, 1]
  v1::EvictionPolicy policy;    // method "none" or a known scorer; codec a known codec
  std::string policy_string;    // canonical: "<method>:<ratio>:<codec>", e.g. "snapkv:0.2:int8"
};

// A tool-call duration in ms (hint or observation): in [0, max].
absl::Status ValidateDurationMs(std::string_view field, int64_t ms, absl::Duration max);

// Method "" or "none" keeps everything (ratio 0 or 1; sent as "none", 0); any other method must be
// a known scorer with budget_ratio in (0, 1]; codec "" takes `default_codec`, else a known codec.
// Decode-time eviction (decode_budget_tokens, decode_interval >= 0) needs a method; its interval
// is sent only with a budget.
absl::StatusOr<v1::EvictionPolicy> ResolvePolicy(const v1::EvictionPolicy& policy,
                                                 std::string_view default_codec);
// "<method>:<ratio>:<codec>" with the ratio in its shortest round-trip form ("none:1:fp16"),
// then ":decode<budget>/<interval>" with decode-time eviction.
std::string PolicyString(const v1::EvictionPolicy& resolved);

// Checks ranges (temperature finite in [0, 100], top_k in [0, vocab], top_p 0 (= 1) or in (0, 1],
// max_tokens in [0, max_output_tokens], stop as model::ValidateStopStrings) and fills max_tokens 0
// with the default, shortened to what the context has left after `prompt_tokens`.
absl::StatusOr<v1::SamplingParams> ResolveSampling(const v1::SamplingParams& sampling,
                                                   int64_t prompt_tokens, const TurnLimits& limits);

// The conversation as token ids: `tokens` as given (each in [0, vocab)), `chat` rendered with
// the model's chat template plus the assistant prompt, or `text` tokenized as it is. Non-empty and
// at most max_prompt_tokens.
absl::StatusOr<std::vector<int32_t>> PromptTokens(const v1::GenerateRequest& request,
                                                  const model::Tokenizer& tokenizer,
                                                  const TurnLimits& limits);

// All of the above for one Generate request (session id, tool hints included).
absl::StatusOr<Turn> ResolveTurn(const v1::GenerateRequest& request,
                                 const model::Tokenizer& tokenizer, const TurnLimits& limits);

}  // namespace glimpse::frontend

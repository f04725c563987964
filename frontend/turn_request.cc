#include "frontend/turn_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/eviction/decode_eviction.h"
#include "core/eviction/scorer.h"
#include "core/kvpage/codec.h"
#include "core/model/stop_strings.h"
#include "proto/limits.h"

namespace glimpse::frontend {
namespace {

bool IsKnownScorer(const std::string& method) {
  for (const std::string& name : eviction::KnownScorers()) {
    if (name == method) return true;
  }
  return false;
}

std::string CodecNames() {
  std::vector<std::string> names;
  for (const kvpage::CodecInfo& codec : kvpage::AllCodecs()) names.push_back(codec.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::vector<int32_t>> GivenTokens(const v1::TokenIds& ids,
                                                 const TurnLimits& limits) {
  for (int i = 0; i < ids.ids_size(); ++i) {
    const int32_t id = ids.ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens.ids[%d] = %d is outside the vocabulary [0, %d)", i, id, limits.vocab_size));
    }
  }
  return std::vector<int32_t>(ids.ids().begin(), ids.ids().end());
}

absl::StatusOr<std::vector<int32_t>> ChatTokens(const v1::Conversation& chat,
                                                const model::Tokenizer& tokenizer) {
  if (chat.messages_size() == 0) {
    return absl::InvalidArgumentError("chat.messages is empty");
  }
  std::vector<model::ChatTurn> turns;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant" &&
        m.role() != "tool") {
      return absl::InvalidArgumentError(
          absl::StrFormat("chat.messages[%d].role \"%s\" is not system, user, assistant or tool", i,
                          absl::CHexEscape(m.role())));
    }
    turns.push_back({m.role(), m.content()});
  }
  return tokenizer.Encode(tokenizer.ApplyChatTemplate(turns, /*add_generation_prompt=*/true));
}

}  // namespace

absl::Status ValidateDurationMs(std::string_view field, int64_t ms, absl::Duration max) {
  if (ms >= 0 && ms <= absl::ToInt64Milliseconds(max)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s = %d is outside [0, %d] ms", field, ms, absl::ToInt64Milliseconds(max)));
}

absl::StatusOr<v1::EvictionPolicy> ResolvePolicy(const v1::EvictionPolicy& policy,
                                                 std::string_view default_codec) {
  v1::EvictionPolicy out;
  const double ratio = policy.budget_ratio();
  if (policy.method().empty() || policy.method() == "none") {
    if (ratio != 0 && ratio != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy.budget_ratio = %g with method \"none\" (keep everything): want 0 or 1", ratio));
    }
    out.set_method("none");
  } else {
    if (!IsKnownScorer(policy.method())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy.method \"%s\" is not a known scorer (known: none, %s)",
          absl::CHexEscape(policy.method()), absl::StrJoin(eviction::KnownScorers(), ", ")));
    }
    if (!(ratio > 0 && ratio <= 1)) {  // also rejects NaN
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy.budget_ratio = %g is outside (0, 1] for method \"%s\"", ratio, policy.method()));
    }
    out.set_method(policy.method());
    out.set_budget_ratio(ratio);
  }
  const std::string codec = policy.codec().empty() ? std::string(default_codec) : policy.codec();
  if (kvpage::FindCodecByName(codec) == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("policy.codec \"%s\" is not one of %s",
                                                      absl::CHexEscape(codec), CodecNames()));
  }
  out.set_codec(codec);
  if (policy.decode_budget_tokens() != 0 || policy.decode_interval() != 0) {
    // The workers check the ranges again (worker::SetDecodeEviction); here what a request can get
    // wrong.
    if (out.method() == "none") {
      return absl::InvalidArgumentError(
          "policy.decode_budget_tokens needs an eviction method (policy.method) to choose what "
          "goes");
    }
    if (policy.decode_budget_tokens() < 0 || policy.decode_interval() < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy.decode_budget_tokens = %d and policy.decode_interval = %d must be >= 0",
          policy.decode_budget_tokens(), policy.decode_interval()));
    }
    if (policy.decode_budget_tokens() > 0) {  // one spelling per behaviour: the key's namespace
      out.set_decode_budget_tokens(policy.decode_budget_tokens());
      out.set_decode_interval(policy.decode_interval() > 0
                                  ? policy.decode_interval()
                                  : static_cast<int32_t>(eviction::kDefaultDecodeInterval));
    }
  }
  return out;
}

std::string PolicyString(const v1::EvictionPolicy& resolved) {
  const double ratio = resolved.method() == "none" ? 1.0 : resolved.budget_ratio();
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), ratio);  // shortest round-trip form
  std::string out = absl::StrFormat("%s:%s:%s", resolved.method(), std::string_view(buf, end - buf),
                                    resolved.codec());
  // States kept under decode-time eviction hold other entries: another namespace.
  if (resolved.decode_budget_tokens() > 0) {
    absl::StrAppendFormat(&out, ":decode%d/%d", resolved.decode_budget_tokens(),
                          resolved.decode_interval());
  }
  return out;
}

absl::StatusOr<v1::SamplingParams> ResolveSampling(const v1::SamplingParams& s,
                                                   int64_t prompt_tokens,
                                                   const TurnLimits& limits) {
  if (!std::isfinite(s.temperature()) || s.temperature() < 0 || s.temperature() > 100) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.temperature = %g is outside [0, 100]", s.temperature()));
  }
  if (s.top_k() < 0 || s.top_k() > limits.vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling.top_k = %d is outside [0, %d] (0: off)", s.top_k(), limits.vocab_size));
  }
  if (!std::isfinite(s.top_p()) || s.top_p() < 0 || s.top_p() > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.top_p = %g is outside (0, 1] (0 or 1: off)", s.top_p()));
  }
  if (s.max_tokens() < 0 || s.max_tokens() > limits.max_output_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.max_tokens = %d is outside [0, %d] (0: the default %d)",
                        s.max_tokens(), limits.max_output_tokens, limits.default_max_tokens));
  }
  RETURN_IF_ERROR(model::ValidateStopStrings({s.stop().begin(), s.stop().end()}, "sampling.stop"));
  const int64_t room = limits.context_length - prompt_tokens;
  v1::SamplingParams out = s;
  if (out.top_p() == 0) out.set_top_p(1);
  if (out.max_tokens() == 0) {
    out.set_max_tokens(static_cast<int32_t>(std::min<int64_t>(limits.default_max_tokens, room)));
  }
  if (out.max_tokens() < 1 || out.max_tokens() > room) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling.max_tokens = %d after a prompt of %d tokens does not fit the model's context of "
        "%d tokens",
        out.max_tokens(), prompt_tokens, limits.context_length));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> PromptTokens(const v1::GenerateRequest& request,
                                                  const model::Tokenizer& tokenizer,
                                                  const TurnLimits& limits) {
  std::vector<int32_t> tokens;
  if (request.has_tokens()) {
    ASSIGN_OR_RETURN(tokens, GivenTokens(request.tokens(), limits));
  } else if (request.has_chat()) {
    ASSIGN_OR_RETURN(tokens, ChatTokens(request.chat(), tokenizer));
  } else if (request.input_case() == v1::GenerateRequest::kText) {
    tokens = tokenizer.Encode(request.text());
  } else {
    return absl::InvalidArgumentError(
        "input: set exactly one of tokens, chat and text (none is set)");
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(request.has_tokens() ? "tokens.ids is empty"
                                                           : "text is empty (no tokens)");
  }
  if (static_cast<int64_t>(tokens.size()) > limits.max_prompt_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the conversation is %d tokens; max_prompt_tokens is %d", tokens.size(),
                        limits.max_prompt_tokens));
  }
  return tokens;
}

absl::StatusOr<Turn> ResolveTurn(const v1::GenerateRequest& request,
                                 const model::Tokenizer& tokenizer, const TurnLimits& limits) {
  RETURN_IF_ERROR(v1::CheckId("session_id", request.session_id()));
  RETURN_IF_ERROR(v1::CheckToolName("tool_name", request.tool_name()));
  RETURN_IF_ERROR(
      ValidateDurationMs("expected_tool_ms", request.expected_tool_ms(), limits.max_tool_hint));
  Turn turn;
  ASSIGN_OR_RETURN(turn.tokens, PromptTokens(request, tokenizer, limits));
  ASSIGN_OR_RETURN(
      turn.sampling,
      ResolveSampling(request.sampling(), static_cast<int64_t>(turn.tokens.size()), limits));
  if (request.has_policy()) {
    ASSIGN_OR_RETURN(turn.policy, ResolvePolicy(request.policy(), limits.default_policy.codec()));
  } else {
    turn.policy = limits.default_policy;
  }
  turn.policy_string = PolicyString(turn.policy);
  return turn;
}

}  // namespace glimpse::frontend

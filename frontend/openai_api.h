// The OpenAI HTTP API (docs/openai_api.md) in terms of glimpse.v1.Frontend: a request body becomes
// one GenerateRequest, the turn's events become a response body or server-sent-event chunks.
// Pure functions and one small state machine; no I/O (openai_server.h serves them).
//
// Sessions: OpenAI's API has none, so a request names its session in the X-Glimpse-Session
// header, else in the extension field glimpse.session_id, else in `user`; a request that names
// none runs as a one-off session that the server ends after the reply (no KV stays hot). Every
// request carries the whole conversation, as a Generate request does.
//
// Tool calls follow the Hermes convention that vLLM's `hermes` parser and Qwen-style templates use:
// `tools` are described in the system turn, a call is `<tool_call>{"name": ..., "arguments":
// {...}}</tool_call>` in the assistant's text (parsed out of replies into `tool_calls`, and written
// back that way when a later request carries them), and tool results are "tool" turns.
//
// Every error is an ApiError in OpenAI's shape, with the HTTP status vLLM's server would send.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/stop_strings.h"
#include "glimpse/v1/frontend.pb.h"
#include "nlohmann/json.hpp"

namespace glimpse::frontend::openai {

enum class Endpoint { kChat, kCompletion };  // /v1/chat/completions, /v1/completions

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // empty: null
  std::string code;   // empty: null
};
// The HTTP status and type of a gRPC status code (INVALID_ARGUMENT 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503,
// DEADLINE_EXCEEDED 504, FAILED_PRECONDITION 400, others 500).
ApiError ErrorFromStatus(const absl::Status& status);
std::string ErrorBody(const ApiError& error);

// Nesting deeper than this is refused before parsing (a body is untrusted).
inline constexpr int kMaxJsonDepth = 64;
// Tools a request may describe (their JSON goes into the prompt).
inline constexpr size_t kMaxTools = 64;

// The headers a request's translation reads (values as sent; empty: absent).
struct RequestHeaders {
  std::string session;           // X-Glimpse-Session
  std::string tool_name;         // X-Glimpse-Tool-Name: the lease hint for the pause after
  std::string expected_tool_ms;  // X-Glimpse-Expected-Tool-Ms
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  v1::GenerateRequest generate;  // session_id empty when `one_off`
  bool one_off = false;          // no session named
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool tools = false;          // tools offered: replies are parsed for tool calls
  bool seeded = false;         // `seed` given; else the server draws one (OpenAI's default
                               // temperature is 1, so an unseeded request samples afresh)
};

// Parses a /v1/chat/completions or /v1/completions body. `model_id` is the served model's name:
// a request naming another is NOT_FOUND (404, code model_not_found); one naming none is served.
// Everything else wrong is INVALID_ARGUMENT naming the parameter. Session ids and limits are
// checked by the frontend as for any Generate request.
absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body,
                                           const RequestHeaders& headers,
                                           std::string_view model_id);

// Whether `body` nests objects and arrays at most `max_depth` deep (strings skipped).
bool JsonDepthWithin(std::string_view body, int max_depth);

struct ToolCall {
  std::string id;  // "call_<n>" unique within the reply
  std::string name;
  std::string arguments;  // a JSON object, serialised (OpenAI's convention)
};
struct ParsedReply {
  std::string content;  // the text outside tool-call blocks
  std::vector<ToolCall> tool_calls;
};
// Splits a reply into text and well-formed `<tool_call>` blocks; a block that is not a JSON object
// with a string "name" stays in the text.
ParsedReply ParseToolCalls(std::string_view text);

// What one turn produced, from its GenerateEvents.
struct TurnSummary {
  std::string session_id;  // empty for a one-off session
  std::string source;      // "hot", "warm", "recompute", "prefill_worker"
  std::string decode_worker;
  // Set when a prefill worker prefilled the turn: where its prefill started ("warm",
  // "recompute"); reused_tokens are then the tokens it loaded from a cache node.
  std::string prefill_worker;
  std::string prefill_source;
  int32_t prompt_tokens = 0;
  int32_t reused_tokens = 0;
  int32_t completion_tokens = 0;
  std::string finish_reason;  // the turn's: "stop" or "length"
  int64_t kv_tokens = 0;
  int64_t hot_tokens = 0;
  int64_t lease_ttl_ms = 0;
  void Add(const v1::GenerateEvent& event);  // started, done and lease events
};

// The shared fields of one response: "chatcmpl-…"/"cmpl-…" id, creation time, model.
struct ResponseHeader {
  std::string id;
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A whole non-streaming response body.
nlohmann::json ResponseBody(Endpoint endpoint, const ResponseHeader& header, bool tools,
                            std::string_view text, const TurnSummary& turn);

// Turns a turn's streamed text into chat.completion.chunk / text_completion chunks. With tools,
// text from the first "<tool_call>" on is held back and sent as tool_calls at the end.
class ChunkWriter {
 public:
  ChunkWriter(Endpoint endpoint, ResponseHeader header, bool tools, bool include_usage);
  // The chunks for the first event (a chat's opening {"role": "assistant"} delta).
  std::vector<nlohmann::json> Start();
  // The chunks for one piece of streamed text (none while it is held back).
  std::vector<nlohmann::json> Text(std::string_view piece);
  // The closing chunks: held-back text or tool calls, finish_reason with the glimpse extension,
  // then usage when asked for.
  std::vector<nlohmann::json> Finish(const TurnSummary& turn);

 private:
  nlohmann::json Chunk(nlohmann::json delta_or_text) const;

  const Endpoint endpoint_;
  const ResponseHeader header_;
  const bool tools_;
  const bool include_usage_;
  bool in_call_ = false;  // with tools: a "<tool_call>" was seen
  std::string held_;      // text not sent yet: a possible start of "<tool_call>", or all from it
};

// The OpenAI finish reason: "tool_calls" when the reply has any, else the turn's.
std::string FinishReason(const TurnSummary& turn, bool has_tool_calls);
// The "usage" object.
nlohmann::json Usage(const TurnSummary& turn);

}  // namespace glimpse::frontend::openai

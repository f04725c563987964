#include "frontend/openai_api.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/common/status_macros.h"
#include "frontend/turn_request.h"
#include "proto/names.h"

namespace glimpse::frontend::openai {
namespace {

using nlohmann::json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

absl::Status Bad(std::string_view param, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(param), ": ", std::string(what)));
}

// The member `key` of `j` when present and not null.
const json* Field(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> String(const json& j, std::string_view key) {
  const json* v = Field(j, key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) return Bad(key, "must be a string");
  return v->get<std::string>();
}

absl::StatusOr<bool> Bool(const json& j, std::string_view key) {
  const json* v = Field(j, key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) return Bad(key, "must be true or false");
  return v->get<bool>();
}

// An integer in [lo, hi]; `fallback` when absent.
absl::StatusOr<int64_t> Int(const json& j, std::string_view key, int64_t lo, int64_t hi,
                            int64_t fallback) {
  const json* v = Field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return Bad(key, "must be an integer");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) return Bad(key, absl::StrFormat("%d is outside [%d, %d]", x, lo, hi));
  return x;
}

absl::StatusOr<double> Number(const json& j, std::string_view key, double lo, double hi,
                              double fallback) {
  const json* v = Field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return Bad(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return Bad(key, absl::StrFormat("%g is outside [%g, %g]", x, lo, hi));
  }
  return x;
}

// Parameters Glimpse does not implement: refused when set to anything but their no-op value.
absl::Status RefuseUnsupported(const json& body) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = Field(body, key); v != nullptr && (!v->is_number() || *v != 0)) {
      return Bad(key, "is not supported (only 0)");
    }
  }
  if (const json* v = Field(body, "logprobs"); v != nullptr && *v != false) {
    return Bad("logprobs", "is not supported");
  }
  if (const json* v = Field(body, "logit_bias"); v != nullptr && !v->empty()) {
    return Bad("logit_bias", "is not supported");
  }
  if (const json* v = Field(body, "echo"); v != nullptr && *v != false) {
    return Bad("echo", "is not supported");
  }
  if (const json* v = Field(body, "suffix"); v != nullptr && *v != "") {
    return Bad("suffix", "is not supported");
  }
  if (const json* v = Field(body, "best_of"); v != nullptr && *v != 1) {
    return Bad("best_of", "is not supported (only 1)");
  }
  if (const json* v = Field(body, "n"); v != nullptr && *v != 1) {
    return Bad("n", "is not supported (only 1)");
  }
  if (const json* v = Field(body, "response_format"); v != nullptr) {
    if (!v->is_object() || v->value("type", "") != "text") {
      return Bad("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, v1::SamplingParams& s) {
  const json* v = Field(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    s.add_stop(v->get<std::string>());
  } else if (v->is_array() && v->size() <= model::kMaxStopStrings) {
    for (const json& e : *v) {
      if (!e.is_string()) return Bad("stop", "must be a string or an array of strings");
      s.add_stop(e.get<std::string>());
    }
  } else {
    return Bad("stop", absl::StrFormat("must be a string or an array of at most %d strings",
                                       model::kMaxStopStrings));
  }
  return model::ValidateStopStrings({s.stop().begin(), s.stop().end()}, "stop");
}

absl::Status ParseSampling(const json& body, v1::SamplingParams& s, bool* seeded) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  int64_t max_tokens = 0;
  ASSIGN_OR_RETURN(max_tokens, Int(body, "max_tokens", 1, kInt32Max, 0));
  ASSIGN_OR_RETURN(max_tokens, Int(body, "max_completion_tokens", 1, kInt32Max, max_tokens));
  s.set_max_tokens(static_cast<int32_t>(max_tokens));
  // OpenAI's defaults: temperature 1, top_p 1.
  ASSIGN_OR_RETURN(const double temperature, Number(body, "temperature", 0, 2, 1));
  s.set_temperature(static_cast<float>(temperature));
  ASSIGN_OR_RETURN(const double top_p, Number(body, "top_p", 1e-9, 1, 1));
  s.set_top_p(static_cast<float>(top_p));
  // vLLM's extension; -1 (its "off") is 0 here.
  ASSIGN_OR_RETURN(const int64_t top_k, Int(body, "top_k", -1, kInt32Max, 0));
  s.set_top_k(static_cast<int32_t>(std::max<int64_t>(top_k, 0)));
  *seeded = Field(body, "seed") != nullptr;
  ASSIGN_OR_RETURN(const int64_t seed, Int(body, "seed", INT64_MIN, INT64_MAX, 0));
  s.set_seed(static_cast<uint64_t>(seed));
  return ParseStop(body, s);
}

// The "glimpse" extension object: session, eviction policy and lease hints.
absl::Status ParseExtension(const json& body, v1::GenerateRequest& g, std::string* session) {
  const json* ext = Field(body, "glimpse");
  if (ext == nullptr) return absl::OkStatus();
  if (!ext->is_object()) return Bad("glimpse", "must be an object");
  ASSIGN_OR_RETURN(*session, String(*ext, "session_id"));
  ASSIGN_OR_RETURN(*g.mutable_tool_name(), String(*ext, "tool_name"));
  ASSIGN_OR_RETURN(const int64_t ms, Int(*ext, "expected_tool_ms", 0, INT64_MAX, 0));
  g.set_expected_tool_ms(ms);
  const json* policy = Field(*ext, "policy");
  if (policy == nullptr) return absl::OkStatus();
  if (!policy->is_object()) return Bad("glimpse.policy", "must be an object");
  v1::EvictionPolicy& p = *g.mutable_policy();
  ASSIGN_OR_RETURN(*p.mutable_method(), String(*policy, "method"));
  ASSIGN_OR_RETURN(const double ratio, Number(*policy, "budget_ratio", 0, 1, 0));
  p.set_budget_ratio(ratio);
  ASSIGN_OR_RETURN(*p.mutable_codec(), String(*policy, "codec"));
  ASSIGN_OR_RETURN(const int64_t budget,
                   Int(*policy, "decode_budget_tokens", 0, std::numeric_limits<int32_t>::max(), 0));
  p.set_decode_budget_tokens(budget);
  ASSIGN_OR_RETURN(const int64_t interval,
                   Int(*policy, "decode_interval", 0, std::numeric_limits<int32_t>::max(), 0));
  p.set_decode_interval(interval);
  return absl::OkStatus();
}

absl::Status ApplyHeaders(const RequestHeaders& h, v1::GenerateRequest& g, std::string* session) {
  if (!h.session.empty()) *session = h.session;
  if (!h.tool_name.empty()) g.set_tool_name(h.tool_name);
  if (!h.expected_tool_ms.empty()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(h.expected_tool_ms, &ms)) {
      return Bad("X-Glimpse-Expected-Tool-Ms", "must be an integer number of milliseconds");
    }
    g.set_expected_tool_ms(ms);
  }
  return absl::OkStatus();
}

// A message's content: a string, null, or text parts.
absl::StatusOr<std::string> Content(const json& message, const std::string& where) {
  const json* c = Field(message, "content");
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return Bad(where + ".content", "must be a string or an array of parts");
  std::string text;
  for (const json& part : *c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Bad(where + ".content",
                 "only {\"type\": \"text\", \"text\": ...} parts are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls written back as the model would have produced them.
absl::StatusOr<std::string> ToolCallsText(const json& calls, const std::string& where) {
  if (!calls.is_array()) return Bad(where + ".tool_calls", "must be an array");
  std::string text;
  for (const json& call : calls) {
    const json* fn = call.is_object() ? Field(call, "function") : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Bad(where + ".tool_calls", "each needs function.name");
    }
    // The arguments as given when they are JSON text (ours are the model's own bytes), so that
    // a call written in the template's layout renders to the tokens the model generated and the
    // session's hot KV still matches.
    std::string args = "{}";
    if (const json* a = Field(*fn, "arguments"); a != nullptr) {
      const bool text_is_json = a->is_string() &&
                                JsonDepthWithin(a->get<std::string>(), kMaxJsonDepth) &&
                                json::accept(a->get<std::string>());
      args = text_is_json ? a->get<std::string>() : a->dump();
    }
    text += (text.empty() ? "" : "\n") + std::string(kCallOpen) +
            "\n{\"name\": " + (*fn)["name"].dump() + ", \"arguments\": " + args + "}\n" +
            std::string(kCallClose);
  }
  return text;
}

// The system turn's description of the tools (the Hermes / Qwen2.5 wording).
absl::StatusOr<std::string> ToolsText(const json& tools) {
  if (!tools.is_array() || tools.size() > kMaxTools) {
    return Bad("tools", absl::StrFormat("must be an array of at most %d tools", kMaxTools));
  }
  std::string listed;
  for (const json& t : tools) {
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name")) {
      return Bad("tools", "each must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
    }
    absl::StrAppend(&listed, "\n", t.dump());
  }
  return absl::StrCat(
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
      listed,
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

absl::Status ParseMessages(const json& body, v1::Conversation& chat, bool* tools) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return Bad("messages", "must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(where, "must be an object");
    ASSIGN_OR_RETURN(std::string role, String(m, "role"));
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Bad(where + ".role", "must be system, developer, user, assistant or tool");
    }
    ASSIGN_OR_RETURN(std::string content, Content(m, where));
    if (const json* calls = Field(m, "tool_calls"); calls != nullptr && role == "assistant") {
      ASSIGN_OR_RETURN(const std::string written, ToolCallsText(*calls, where));
      absl::StrAppend(&content, content.empty() || written.empty() ? "" : "\n", written);
    }
    v1::ChatMessage* out = chat.add_messages();
    out->set_role(role);
    out->set_content(std::move(content));
  }
  const json* offered = Field(body, "tools");
  std::string choice = "auto";
  if (const json* c = Field(body, "tool_choice"); c != nullptr) {
    choice = c->is_string() ? c->get<std::string>() : "named";
  }
  if (choice != "auto" && choice != "none") {
    return Bad("tool_choice", "only \"auto\" and \"none\" are supported");
  }
  *tools = offered != nullptr && !offered->empty() && choice == "auto";
  if (!*tools) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string described, ToolsText(*offered));
  if (chat.messages(0).role() == "system") {
    v1::ChatMessage& system = *chat.mutable_messages(0);
    system.set_content(absl::StrCat(system.content(), "\n\n", described));
  } else {
    v1::ChatMessage system;
    system.set_role("system");
    system.set_content(described);
    chat.mutable_messages()->Add(std::move(system));
    std::rotate(chat.mutable_messages()->rbegin(), chat.mutable_messages()->rbegin() + 1,
                chat.mutable_messages()->rend());
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, v1::GenerateRequest& g) {
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return Bad("prompt", "is required");
  const json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number_integer()) {
    if (prompt->size() != 1) return Bad("prompt", "one prompt per request");
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    g.set_text(one->get<std::string>());
    return absl::OkStatus();
  }
  if (!one->is_array()) return Bad("prompt", "must be a string or an array of token ids");
  for (const json& id : *one) {
    if (!id.is_number_integer() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return Bad("prompt", "token ids must be non-negative integers");
    }
    g.mutable_tokens()->add_ids(id.get<int32_t>());
  }
  return absl::OkStatus();
}

json Extension(const TurnSummary& turn) {
  json ext = {{"source", turn.source},
              {"decode_worker", turn.decode_worker},
              {"reused_tokens", turn.reused_tokens},
              {"kv_tokens", turn.kv_tokens},
              {"hot_tokens", turn.hot_tokens},
              {"lease_ttl_ms", turn.lease_ttl_ms}};
  if (!turn.session_id.empty()) ext["session_id"] = turn.session_id;
  if (!turn.prefill_worker.empty()) {
    ext["prefill_worker"] = turn.prefill_worker;
    ext["prefill_source"] = turn.prefill_source;
  }
  return ext;
}

json ToolCallsJson(const std::vector<ToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

// A tool call's arguments as OpenAI sends them, a JSON text: the model's own bytes when the call
// is laid out as the template shows it ({"name": ..., "arguments": ARGS} with ARGS last), else
// the parsed value serialised.
std::string ArgumentsText(std::string_view inside, const json& call) {
  const json args = call.value("arguments", json::object());
  if (args.is_string()) return args.get<std::string>();
  constexpr std::string_view kKey = "\"arguments\":";
  const size_t key = inside.rfind(kKey);
  const size_t last = inside.find_last_of('}');
  if (key != std::string_view::npos && last != std::string_view::npos && last > key) {
    const std::string raw(absl::StripAsciiWhitespace(
        absl::string_view(inside.data() + key + kKey.size(), last - key - kKey.size())));
    if (json::parse(raw, nullptr, /*allow_exceptions=*/false) == args) return raw;
  }
  return args.dump();
}

}  // namespace

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e = {401, "authentication_error", e.message, "", "invalid_api_key"};
      break;
    case absl::StatusCode::kPermissionDenied:
      e = {403, "permission_error", e.message, "", ""};
      break;
    case absl::StatusCode::kNotFound:
      e = {404, "not_found_error", e.message, "", ""};
      break;
    case absl::StatusCode::kResourceExhausted:
      e = {429, "rate_limit_error", e.message, "", ""};
      break;
    case absl::StatusCode::kUnavailable:
      e = {503, "service_unavailable", e.message, "", ""};
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e = {504, "timeout", e.message, "", ""};
      break;
    default:
      e = {500, "internal_error", e.message, "", ""};
  }
  return e;
}

std::string ErrorBody(const ApiError& error) {
  const json null;
  return json{{"error",
               {{"message", error.message},
                {"type", error.type},
                {"param", error.param.empty() ? null : json(error.param)},
                {"code", error.code.empty() ? null : json(error.code)}}}}
      .dump();
}

bool JsonDepthWithin(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body,
                                           const RequestHeaders& headers,
                                           std::string_view model_id) {
  if (!JsonDepthWithin(body, kMaxJsonDepth)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the body nests deeper than %d levels", kMaxJsonDepth));
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the body is not a JSON object");
  }
  ASSIGN_OR_RETURN(const std::string model, String(j, "model"));
  if (!model.empty() && model != model_id) {
    return absl::NotFoundError(absl::StrFormat("The model `%s` does not exist.", model));
  }
  RETURN_IF_ERROR(RefuseUnsupported(j));
  ParsedRequest r;
  r.endpoint = endpoint;
  ASSIGN_OR_RETURN(r.stream, Bool(j, "stream"));
  if (const json* o = Field(j, "stream_options"); o != nullptr) {
    if (!o->is_object()) return Bad("stream_options", "must be an object");
    ASSIGN_OR_RETURN(r.include_usage, Bool(*o, "include_usage"));
  }
  v1::GenerateRequest& g = r.generate;
  RETURN_IF_ERROR(ParseSampling(j, *g.mutable_sampling(), &r.seeded));
  if (endpoint == Endpoint::kChat) {
    RETURN_IF_ERROR(ParseMessages(j, *g.mutable_chat(), &r.tools));
  } else {
    RETURN_IF_ERROR(ParsePrompt(j, g));
  }
  std::string session;
  ASSIGN_OR_RETURN(session, String(j, "user"));
  RETURN_IF_ERROR(ParseExtension(j, g, &session));
  RETURN_IF_ERROR(ApplyHeaders(headers, g, &session));
  r.one_off = session.empty();
  g.set_session_id(session);
  return r;
}

ParsedReply ParseToolCalls(std::string_view text) {
  ParsedReply reply;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kCallOpen, at);
    const size_t close =
        open == std::string_view::npos ? open : text.find(kCallClose, open + kCallOpen.size());
    if (close == std::string_view::npos) break;
    const std::string_view inside =
        text.substr(open + kCallOpen.size(), close - open - kCallOpen.size());
    const json call = json::parse(inside, nullptr, /*allow_exceptions=*/false);
    const size_t end = close + kCallClose.size();
    if (call.is_object() && call.contains("name") && call["name"].is_string()) {
      reply.content += text.substr(at, open - at);
      reply.tool_calls.push_back({absl::StrCat("call_", reply.tool_calls.size()),
                                  call["name"].get<std::string>(), ArgumentsText(inside, call)});
    } else {
      reply.content += text.substr(at, end - at);
    }
    at = end;
  }
  reply.content += text.substr(std::min(at, text.size()));
  // The blank lines around removed blocks are the template's, not the reply's.
  if (!reply.tool_calls.empty()) {
    reply.content = std::string(absl::StripAsciiWhitespace(reply.content));
  }
  return reply;
}

void TurnSummary::Add(const v1::GenerateEvent& event) {
  if (event.has_started()) {
    source = v1::StateSourceName(event.started().source());
    decode_worker = event.decode_worker_id();
    prompt_tokens = event.prompt_tokens();
    reused_tokens = event.started().reused_tokens();
    if (!event.prefill_worker_id().empty()) {
      prefill_worker = event.prefill_worker_id();
      prefill_source = v1::StateSourceName(event.prefill().source());
      reused_tokens = event.prefill().reused_tokens();
    }
  } else if (event.has_done()) {
    completion_tokens = event.done().generated_tokens();
    finish_reason = event.done().finish_reason();
    kv_tokens = event.done().kv_tokens();
    hot_tokens = event.done().hot_tokens();
  } else if (event.has_lease()) {
    lease_ttl_ms = event.lease().ttl_ms();
  }
}

std::string FinishReason(const TurnSummary& turn, bool has_tool_calls) {
  if (has_tool_calls) return "tool_calls";
  return turn.finish_reason == "length" ? "length" : "stop";
}

json Usage(const TurnSummary& turn) {
  return {{"prompt_tokens", turn.prompt_tokens},
          {"completion_tokens", turn.completion_tokens},
          {"total_tokens", turn.prompt_tokens + turn.completion_tokens}};
}

json ResponseBody(Endpoint endpoint, const ResponseHeader& header, bool tools,
                  std::string_view text, const TurnSummary& turn) {
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  if (endpoint == Endpoint::kChat) {
    ParsedReply reply = tools ? ParseToolCalls(text) : ParsedReply{std::string(text), {}};
    json message = {{"role", "assistant"}, {"content", reply.content}};
    if (!reply.tool_calls.empty()) {
      if (reply.content.empty()) message["content"] = nullptr;
      message["tool_calls"] = ToolCallsJson(reply.tool_calls, /*indexed=*/false);
    }
    choice["message"] = std::move(message);
    choice["finish_reason"] = FinishReason(turn, !reply.tool_calls.empty());
  } else {
    choice["text"] = text;
    choice["finish_reason"] = FinishReason(turn, false);
  }
  return {{"id", header.id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", json::array({std::move(choice)})},
          {"usage", Usage(turn)},
          {"glimpse", Extension(turn)}};
}

ChunkWriter::ChunkWriter(Endpoint endpoint, ResponseHeader header, bool tools, bool include_usage)
    : endpoint_(endpoint),
      header_(std::move(header)),
      tools_(tools && endpoint == Endpoint::kChat),
      include_usage_(include_usage) {}

json ChunkWriter::Chunk(json delta_or_text) const {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (endpoint_ == Endpoint::kChat) {
    choice["delta"] = std::move(delta_or_text);
  } else {
    choice["text"] = std::move(delta_or_text);
  }
  return {{"id", header_.id},
          {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", header_.created},
          {"model", header_.model},
          {"choices", json::array({std::move(choice)})}};
}

std::vector<json> ChunkWriter::Start() {
  if (endpoint_ != Endpoint::kChat) return {};
  return {Chunk({{"role", "assistant"}, {"content", ""}})};
}

std::vector<json> ChunkWriter::Text(std::string_view piece) {
  std::string shown(piece);
  if (tools_) {
    if (in_call_) {
      held_.append(piece);
      return {};
    }
    held_.append(piece);
    const size_t open = held_.find(kCallOpen);
    const size_t shown_bytes = open != std::string::npos
                                   ? open
                                   : held_.size() - model::PartialMatchAtEnd(held_, kCallOpen);
    in_call_ = open != std::string::npos;
    shown = held_.substr(0, shown_bytes);
    held_.erase(0, shown_bytes);
  }
  if (shown.empty()) return {};
  if (endpoint_ == Endpoint::kChat) return {Chunk({{"content", shown}})};
  return {Chunk(shown)};
}

std::vector<json> ChunkWriter::Finish(const TurnSummary& turn) {
  std::vector<json> out;
  bool called = false;
  if (tools_ && !held_.empty()) {
    const ParsedReply reply = ParseToolCalls(held_);
    if (!reply.content.empty()) out.push_back(Chunk({{"content", reply.content}}));
    if (!reply.tool_calls.empty()) {
      out.push_back(Chunk({{"tool_calls", ToolCallsJson(reply.tool_calls, /*indexed=*/true)}}));
      called = true;
    }
    held_.clear();
  }
  json last = Chunk(endpoint_ == Endpoint::kChat ? json::object() : json(""));
  last["choices"][0]["finish_reason"] = FinishReason(turn, called);
  last["glimpse"] = Extension(turn);
  out.push_back(std::move(last));
  if (include_usage_) {
    json usage = Chunk(json::object());
    usage["choices"] = json::array();
    usage["usage"] = Usage(turn);
    out.push_back(std::move(usage));
  }
  return out;
}

}  // namespace glimpse::frontend::openai

#include "frontend/openai_api.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend::openai {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr std::string_view kModel = "SmolLM2-135M-Instruct";

absl::StatusOr<ParsedRequest> Chat(const json& body, const RequestHeaders& headers = {}) {
  return ParseRequest(Endpoint::kChat, body.dump(), headers, kModel);
}

json Hello() { return {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}; }

TEST(OpenAiApiTest, AChatRequestBecomesAGenerateRequestWithOpenAisDefaults) {
  auto r = Chat(Hello());
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& g = r->generate;
  ASSERT_EQ(g.chat().messages_size(), 1);
  EXPECT_EQ(g.chat().messages(0).role(), "user");
  EXPECT_EQ(g.chat().messages(0).content(), "Hi");
  EXPECT_EQ(g.sampling().temperature(), 1.0f);
  EXPECT_EQ(g.sampling().top_p(), 1.0f);
  EXPECT_EQ(g.sampling().max_tokens(), 0);  // the frontend's default
  EXPECT_TRUE(r->one_off);
  EXPECT_FALSE(r->seeded);
  EXPECT_FALSE(r->stream);
}

TEST(OpenAiApiTest, SamplingStopAndStreamOptionsAreRead) {
  json body = Hello();
  body["max_completion_tokens"] = 12;
  body["temperature"] = 0;
  body["top_p"] = 0.5;
  body["seed"] = 7;
  body["stop"] = {"\n\n", "END"};
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["top_k"] = -1;
  auto r = Chat(body);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::SamplingParams& s = r->generate.sampling();
  EXPECT_EQ(s.max_tokens(), 12);
  EXPECT_EQ(s.temperature(), 0.0f);
  EXPECT_EQ(s.top_p(), 0.5f);
  EXPECT_EQ(s.seed(), 7u);
  EXPECT_EQ(s.top_k(), 0);
  EXPECT_THAT(std::vector<std::string>(s.stop().begin(), s.stop().end()),
              ::testing::ElementsAre("\n\n", "END"));
  EXPECT_TRUE(r->seeded && r->stream && r->include_usage);
  body["stop"] = "###";
  EXPECT_EQ(Chat(body)->generate.sampling().stop(0), "###");
}

TEST(OpenAiApiTest, TheSessionComesFromTheHeaderThenTheExtensionThenUser) {
  json body = Hello();
  body["user"] = "from-user";
  EXPECT_EQ(Chat(body)->generate.session_id(), "from-user");
  body["glimpse"] = {{"session_id", "from-ext"},
                     {"tool_name", "web_search"},
                     {"expected_tool_ms", 1500},
                     {"policy", {{"method", "snapkv"}, {"budget_ratio", 0.2}, {"codec", "int8"}}}};
  auto ext = Chat(body);
  ASSERT_TRUE(ext.ok()) << ext.status();
  EXPECT_EQ(ext->generate.session_id(), "from-ext");
  EXPECT_EQ(ext->generate.tool_name(), "web_search");
  EXPECT_EQ(ext->generate.expected_tool_ms(), 1500);
  EXPECT_EQ(ext->generate.policy().method(), "snapkv");
  EXPECT_FLOAT_EQ(ext->generate.policy().budget_ratio(), 0.2);
  EXPECT_EQ(ext->generate.policy().codec(), "int8");
  auto header = Chat(body, {"from-header", "calculator", "200"});
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->generate.session_id(), "from-header");
  EXPECT_EQ(header->generate.tool_name(), "calculator");
  EXPECT_EQ(header->generate.expected_tool_ms(), 200);
  EXPECT_FALSE(header->one_off);
  EXPECT_THAT(Chat(body, {"", "", "soon"}).status().message(),
              HasSubstr("X-Glimpse-Expected-Tool-Ms"));
}

TEST(OpenAiApiTest, BadRequestsNameTheParameter) {
  struct Case {
    json patch;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{"messages", json::array()}}, "messages: must be a non-empty array"},
      {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
       "messages[0].content: only"},
      {{{"temperature", 3}}, "temperature: 3 is outside [0, 2]"},
      {{{"temperature", "hot"}}, "temperature: must be a number"},
      {{{"max_tokens", 0}}, "max_tokens: 0 is outside"},
      {{{"max_tokens", 1.5}}, "max_tokens: must be an integer"},
      {{{"stop", {"a", "b", "c", "d", "e"}}}, "stop: must be a string or an array of at most 4"},
      {{{"stop", ""}}, "stop[0] is 0 bytes"},
      {{{"n", 2}}, "n: is not supported"},
      {{{"presence_penalty", 0.5}}, "presence_penalty: is not supported"},
      {{{"logprobs", true}}, "logprobs: is not supported"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"tool_choice", "required"}}, "tool_choice: only"},
      {{{"stream", "yes"}}, "stream: must be true or false"},
      {{{"glimpse", {{"policy", {{"budget_ratio", 2}}}}}}, "budget_ratio: 2 is outside"},
  };
  for (const Case& c : cases) {
    json body = Hello();
    body.update(c.patch);
    absl::Status st = Chat(body).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.expect << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(c.expect));
  }
}

TEST(OpenAiApiTest, AnUnknownModelIsNotFoundAndBrokenBodiesAreRefused) {
  json body = Hello();
  body["model"] = "gpt-4o";
  absl::Status st = Chat(body).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("The model `gpt-4o` does not exist."));
  body.erase("model");
  EXPECT_TRUE(Chat(body).ok());
  EXPECT_THAT(ParseRequest(Endpoint::kChat, "{\"messages\": [", {}, kModel).status().message(),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseRequest(Endpoint::kChat, "[1]", {}, kModel).status().message(),
              HasSubstr("not a JSON object"));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ParseRequest(Endpoint::kChat, deep, {}, kModel).status().message(),
              HasSubstr("nests deeper than 64"));
}

TEST(OpenAiApiTest, JsonDepthSkipsBracketsInsideStrings) {
  EXPECT_TRUE(JsonDepthWithin(R"({"a": "[[[[[[", "b": "\"{{{{"})", 1));
  EXPECT_TRUE(JsonDepthWithin(R"({"a": [1]})", 2));
  EXPECT_FALSE(JsonDepthWithin(R"({"a": [1]})", 1));
}

TEST(OpenAiApiTest, ToolsGoIntoTheSystemTurnAndEarlierCallsAreWrittenBack) {
  json body = Hello();
  body["messages"] = {
      {{"role", "developer"}, {"content", "Be brief."}},
      {{"role", "user"},
       {"content",
        {{{"type", "text"}, {"text", "Weather in "}}, {{"type", "text"}, {"text", "Paris?"}}}}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_0"},
          {"type", "function"},
          {"function", {{"name", "weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "18 C, sunny"}},
  };
  body["tools"] = {{{"type", "function"},
                    {"function", {{"name", "weather"}, {"parameters", {{"type", "object"}}}}}}};
  auto r = Chat(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tools);
  const v1::Conversation& chat = r->generate.chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_THAT(chat.messages(0).content(), HasSubstr("Be brief.\n\n# Tools"));
  EXPECT_THAT(chat.messages(0).content(), HasSubstr("\"name\":\"weather\""));
  EXPECT_EQ(chat.messages(1).content(), "Weather in Paris?");
  EXPECT_EQ(
      chat.messages(2).content(),
      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(chat.messages(3).role(), "tool");
  EXPECT_EQ(chat.messages(3).content(), "18 C, sunny");

  // Without a system turn one is put first; tool_choice "none" offers nothing.
  body["messages"].erase(0);
  auto inserted = Chat(body);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  ASSERT_EQ(inserted->generate.chat().messages_size(), 4);
  EXPECT_EQ(inserted->generate.chat().messages(0).role(), "system");
  EXPECT_EQ(inserted->generate.chat().messages(1).role(), "user");
  body["tool_choice"] = "none";
  auto none = Chat(body);
  EXPECT_FALSE(none->tools);
  EXPECT_EQ(none->generate.chat().messages_size(), 3);
}

TEST(OpenAiApiTest, ACompletionPromptIsTextOrTokenIds) {
  auto text = ParseRequest(Endpoint::kCompletion, R"({"prompt": "Once upon"})", {}, kModel);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->generate.text(), "Once upon");
  auto listed = ParseRequest(Endpoint::kCompletion, R"({"prompt": ["Once"]})", {}, kModel);
  EXPECT_EQ(listed->generate.text(), "Once");
  auto ids = ParseRequest(Endpoint::kCompletion, R"({"prompt": [[1, 2, 3]]})", {}, kModel);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(ids->generate.tokens().ids(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_THAT(ParseRequest(Endpoint::kCompletion, R"({"prompt": ["a", "b"]})", {}, kModel)
                  .status()
                  .message(),
              HasSubstr("one prompt per request"));
  EXPECT_THAT(
      ParseRequest(Endpoint::kCompletion, R"({"prompt": [1, -2]})", {}, kModel).status().message(),
      HasSubstr("non-negative"));
  EXPECT_THAT(ParseRequest(Endpoint::kCompletion, R"({"prompt": "x", "echo": true})", {}, kModel)
                  .status()
                  .message(),
              HasSubstr("echo"));
}

TEST(OpenAiApiTest, ToolCallBlocksAreParsedOutOfTheReply) {
  ParsedReply r = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>not json</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, "call_0");
  EXPECT_EQ(r.tool_calls[0].name, "weather");
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"city\": \"Paris\"}");  // the model's bytes
  EXPECT_EQ(r.content, "Let me check.\n\n<tool_call>not json</tool_call>");
  EXPECT_TRUE(ParseToolCalls("plain <tool_call> unclosed").tool_calls.empty());
  EXPECT_EQ(ParseToolCalls("plain <tool_call> unclosed").content, "plain <tool_call> unclosed");
}

TEST(OpenAiApiTest, AToolCallInTheTemplatesLayoutRoundTripsByteForByte) {
  const std::string generated =
      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\":  \"Paris\", \"days\": "
      "[1, 2]}}\n</tool_call>";
  ParsedReply reply = ParseToolCalls(generated);
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  json body = Hello();
  body["messages"].push_back(
      {{"role", "assistant"},
       {"tool_calls",
        {{{"id", reply.tool_calls[0].id},
          {"type", "function"},
          {"function",
           {{"name", reply.tool_calls[0].name}, {"arguments", reply.tool_calls[0].arguments}}}}}}});
  auto r = Chat(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.chat().messages(1).content(), generated);
}

TurnSummary Summary() {
  TurnSummary t;
  t.session_id = "s1";
  t.source = "hot";
  t.prompt_tokens = 30;
  t.completion_tokens = 5;
  t.finish_reason = "length";
  return t;
}

TEST(OpenAiApiTest, ResponseBodiesHaveOpenAisShapeAndTheGlimpseExtension) {
  const ResponseHeader h{"chatcmpl-1", 1700000000, std::string(kModel)};
  json chat = ResponseBody(Endpoint::kChat, h, false, "Paris.", Summary());
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"],
            json({{"prompt_tokens", 30}, {"completion_tokens", 5}, {"total_tokens", 35}}));
  EXPECT_EQ(chat["glimpse"]["source"], "hot");
  EXPECT_EQ(chat["glimpse"]["session_id"], "s1");

  json called =
      ResponseBody(Endpoint::kChat, h, true,
                   "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", Summary());
  EXPECT_TRUE(called["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(called["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(called["choices"][0]["finish_reason"], "tool_calls");

  json text = ResponseBody(Endpoint::kCompletion, h, false, " a time", Summary());
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], " a time");
}

TEST(OpenAiApiTest, StreamedChunksHoldBackToolCallsAndEndWithUsage) {
  ChunkWriter w(Endpoint::kChat, {"chatcmpl-2", 1, std::string(kModel)}, /*tools=*/true,
                /*include_usage=*/true);
  std::string content;
  auto collect = [&](const std::vector<json>& chunks) {
    for (const json& c : chunks) {
      EXPECT_EQ(c["object"], "chat.completion.chunk");
      const json& choices = c["choices"];
      if (!choices.empty() && choices[0]["delta"].contains("content")) {
        content += choices[0]["delta"]["content"].get<std::string>();
      }
    }
  };
  std::vector<json> start = w.Start();
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["choices"][0]["delta"]["role"], "assistant");
  for (const char* piece : {"Sure", ". <tool", "_call>{\"name\": \"f\", ",
                            "\"arguments\": {\"x\": 1}}", "</tool_call>"}) {
    collect(w.Text(piece));
  }
  EXPECT_EQ(content, "Sure. ");
  std::vector<json> end = w.Finish(Summary());
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(end[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
  EXPECT_EQ(end[1]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(end[1]["glimpse"]["source"], "hot");
  EXPECT_TRUE(end[2]["choices"].empty());
  EXPECT_EQ(end[2]["usage"]["total_tokens"], 35);

  // A "<" that is not a tool call is sent once it cannot be one.
  ChunkWriter plain(Endpoint::kChat, {"c", 1, "m"}, true, false);
  content.clear();
  collect(plain.Text("a <"));
  EXPECT_EQ(content, "a ");
  collect(plain.Text("b"));
  EXPECT_EQ(content, "a <b");
}

TEST(OpenAiApiTest, ErrorsMapToHttpStatusesInOpenAisShape) {
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("x")).http_status, 400);
  ApiError auth = ErrorFromStatus(absl::UnauthenticatedError("no token"));
  EXPECT_EQ(auth.http_status, 401);
  EXPECT_EQ(auth.code, "invalid_api_key");
  EXPECT_EQ(ErrorFromStatus(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ErrorFromStatus(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::DeadlineExceededError("x")).http_status, 504);
  EXPECT_EQ(ErrorFromStatus(absl::InternalError("x")).http_status, 500);
  const json body = json::parse(ErrorBody(auth));
  EXPECT_EQ(body["error"]["message"], "no token");
  EXPECT_EQ(body["error"]["type"], "authentication_error");
  EXPECT_TRUE(body["error"]["param"].is_null());
}

}  // namespace
}  // namespace glimpse::frontend::openai

#include "frontend/turn_request.h"

#include <cmath>
#include <functional>

#include "core/model/test_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend {
namespace {

using ::testing::HasSubstr;

class TurnRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    limits_.vocab_size = model_->tokenizer().vocab_size();
    limits_.context_length = 1000;
    limits_.max_prompt_tokens = 900;
    limits_.default_max_tokens = 64;
    limits_.max_output_tokens = 512;
    limits_.default_policy.set_method("none");
    limits_.default_policy.set_codec("fp16");
  }
  v1::GenerateRequest Tokens(std::vector<int32_t> ids) {
    v1::GenerateRequest r;
    r.set_session_id("s-1");
    r.mutable_tokens()->mutable_ids()->Assign(ids.begin(), ids.end());
    return r;
  }
  absl::Status Check(const v1::GenerateRequest& r) {
    return ResolveTurn(r, model_->tokenizer(), limits_).status();
  }
  const model::Model* model_ = nullptr;
  TurnLimits limits_;
};

TEST_F(TurnRequestTest, TokensPassThroughWithDefaults) {
  auto turn = ResolveTurn(Tokens({1, 2, 3}), model_->tokenizer(), limits_);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(turn->sampling.max_tokens(), 64);
  EXPECT_EQ(turn->sampling.top_p(), 1.0f);
  EXPECT_EQ(turn->policy.method(), "none");
  EXPECT_EQ(turn->policy_string, "none:1:fp16");
}

TEST_F(TurnRequestTest, ChatIsRenderedWithTheTemplate) {
  v1::GenerateRequest r;
  r.set_session_id("chat");
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("What is 2+2?");
  auto turn = ResolveTurn(r, model_->tokenizer(), limits_);
  ASSERT_TRUE(turn.ok()) << turn.status();
  const model::Tokenizer& tok = model_->tokenizer();
  EXPECT_EQ(turn->tokens, tok.Encode(tok.ApplyChatTemplate({{"user", "What is 2+2?"}}, true)));
  EXPECT_THAT(tok.Decode(turn->tokens).value(), HasSubstr("<|im_start|>assistant\n"));
}

TEST_F(TurnRequestTest, InvalidInputNamesFieldAndValue) {
  struct Case {
    std::function<void(v1::GenerateRequest&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_session_id(""); }, "session_id is empty"},
      {[](auto& r) { r.set_session_id("a/b"); }, "0x2f"},
      {[](auto& r) { r.set_session_id(std::string(129, 'a')); }, "129 bytes long"},
      {[](auto& r) { r.clear_tokens(); }, "set exactly one of tokens, chat and text"},
      {[](auto& r) { r.mutable_tokens()->clear_ids(); }, "tokens.ids is empty"},
      {[](auto& r) { r.mutable_tokens()->set_ids(1, -5); }, "tokens.ids[1] = -5"},
      {[](auto& r) { r.mutable_tokens()->set_ids(0, 1 << 30); }, "outside the vocabulary"},
      {[](auto& r) { r.mutable_chat()->add_messages()->set_role("user"); }, ""},  // valid
      {[](auto& r) { r.mutable_chat(); }, "chat.messages is empty"},
      {[](auto& r) { r.mutable_chat()->add_messages()->set_role("robot"); }, "\"robot\""},
      {[](auto& r) { r.mutable_sampling()->set_temperature(-1); }, "sampling.temperature = -1"},
      {[](auto& r) { r.mutable_sampling()->set_temperature(NAN); }, "sampling.temperature"},
      {[](auto& r) { r.mutable_sampling()->set_top_k(-2); }, "sampling.top_k = -2"},
      {[](auto& r) { r.mutable_sampling()->set_top_p(1.5f); }, "sampling.top_p = 1.5"},
      {[](auto& r) { r.mutable_sampling()->set_max_tokens(513); }, "sampling.max_tokens = 513"},
      {[](auto& r) { r.mutable_sampling()->set_max_tokens(-1); }, "sampling.max_tokens = -1"},
      {[](auto& r) { r.mutable_policy()->set_method("magic"); }, "policy.method \"magic\""},
      {[](auto& r) { r.mutable_policy()->set_method("snapkv"); }, "policy.budget_ratio = 0"},
      {[](auto& r) {
         r.mutable_policy()->set_method("snapkv");
         r.mutable_policy()->set_budget_ratio(1.5);
       },
       "policy.budget_ratio = 1.5"},
      {[](auto& r) { r.mutable_policy()->set_budget_ratio(0.5); }, "with method \"none\""},
      {[](auto& r) { r.mutable_policy()->set_codec("zip"); }, "policy.codec \"zip\""},
      {[](auto& r) { r.set_tool_name(std::string(129, 't')); }, "tool_name is 129 bytes"},
      {[](auto& r) { r.set_expected_tool_ms(-1); }, "expected_tool_ms = -1"},
      {[](auto& r) { r.set_expected_tool_ms(3'600'001); }, "expected_tool_ms = 3600001"},
      {[](auto& r) { r.mutable_sampling()->add_stop(""); }, "sampling.stop[0] is 0 bytes"},
      {[](auto& r) {
         for (int i = 0; i < 5; ++i) r.mutable_sampling()->add_stop("x");
       },
       "sampling.stop has 5 strings (at most 4)"},
      {[](auto& r) { r.mutable_sampling()->add_stop("\n\n"); }, ""},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r = Tokens({5, 6, 7});
    c.edit(r);
    absl::Status st = Check(r);
    if (c.expect.empty()) {
      EXPECT_TRUE(st.ok()) << st;
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.expect;
    EXPECT_THAT(st.message(), HasSubstr(c.expect));
  }
}

TEST_F(TurnRequestTest, TextInputIsTokenizedWithoutAChatTemplate) {
  v1::GenerateRequest r;
  r.set_session_id("s");
  r.set_text("The capital of France is");
  auto turn = ResolveTurn(r, model_->tokenizer(), limits_);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->tokens, model_->tokenizer().Encode("The capital of France is"));
  r.set_text("");
  EXPECT_THAT(Check(r).message(), HasSubstr("text is empty"));
}

TEST_F(TurnRequestTest, PromptAndOutputMustFitTheContext) {
  EXPECT_THAT(Check(Tokens(std::vector<int32_t>(901, 1))).message(),
              HasSubstr("901 tokens; max_prompt_tokens is 900"));
  // The default max_tokens shrinks to the room left; an explicit one that does not fit fails.
  limits_.max_prompt_tokens = 999;
  auto turn = ResolveTurn(Tokens(std::vector<int32_t>(990, 1)), model_->tokenizer(), limits_);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->sampling.max_tokens(), 10);
  v1::GenerateRequest r = Tokens(std::vector<int32_t>(990, 1));
  r.mutable_sampling()->set_max_tokens(11);
  EXPECT_THAT(Check(r).message(), HasSubstr("does not fit the model's context of 1000"));
}

TEST_F(TurnRequestTest, PolicyStringIsCanonical) {
  v1::EvictionPolicy p;
  p.set_method("snapkv");
  p.set_budget_ratio(0.2);
  p.set_codec("int8");
  auto resolved = ResolvePolicy(p, "fp16");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(PolicyString(*resolved), "snapkv:0.2:int8");
  p.set_codec("");
  EXPECT_EQ(PolicyString(ResolvePolicy(p, "bf16").value()), "snapkv:0.2:bf16");
  p.set_budget_ratio(1);
  EXPECT_EQ(PolicyString(ResolvePolicy(p, "fp16").value()), "snapkv:1:fp16");
  // "" and "none" are one policy, whatever ratio (0 or 1) was sent.
  v1::EvictionPolicy none;
  v1::EvictionPolicy none1;
  none1.set_method("none");
  none1.set_budget_ratio(1);
  EXPECT_EQ(PolicyString(ResolvePolicy(none, "fp16").value()),
            PolicyString(ResolvePolicy(none1, "fp16").value()));
  EXPECT_EQ(ResolvePolicy(none1, "fp16")->budget_ratio(), 0);  // as the proto says for "none"
}

TEST_F(TurnRequestTest, DecodeTimeEvictionIsItsOwnNamespaceAndNeedsAMethod) {
  v1::EvictionPolicy p;
  p.set_method("snapkv");
  p.set_budget_ratio(0.2);
  p.set_decode_budget_tokens(256);
  EXPECT_EQ(PolicyString(ResolvePolicy(p, "fp16").value()), "snapkv:0.2:fp16:decode256/32");
  p.set_decode_interval(32);  // the default, spelled out: the same namespace
  EXPECT_EQ(PolicyString(ResolvePolicy(p, "fp16").value()), "snapkv:0.2:fp16:decode256/32");
  p.set_decode_budget_tokens(0);  // an interval alone changes nothing
  EXPECT_EQ(PolicyString(ResolvePolicy(p, "fp16").value()), "snapkv:0.2:fp16");
  p.set_decode_budget_tokens(-1);
  EXPECT_THAT(ResolvePolicy(p, "fp16").status().message(), HasSubstr("must be >= 0"));
  v1::EvictionPolicy none;
  none.set_decode_budget_tokens(64);
  EXPECT_THAT(ResolvePolicy(none, "fp16").status().message(), HasSubstr("needs an eviction"));
}

}  // namespace
}  // namespace glimpse::frontend

// The committed eviction profile of the default model (models/lookahead/*.eviction.json, written
// by `glimpse tune`) on what a first-time user sends: a short chat prompt. Every method keeps the
// attention sink (at least 4 first entries; with none the model ends its turn at once), and at a
// 20 % budget, prefilled as a decode worker does (worker::PrefillTurn), the first token is not the
// end of the turn. `make run`'s first turn is this prompt. The learned gates run from their
// committed weights, which the worker finds beside the LookaheadKV module.
#include <string>
#include <vector>

#include "core/eviction/profile.h"
#include "core/model/generator.h"
#include "core/model/test_model.h"
#include "core/worker/policy.h"
#include "core/worker/turn_steps.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

const std::string kSource = GLIMPSE_SOURCE_DIR;
const std::string kModule = kSource + "/models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors";

TEST(CommittedProfileTest, EveryMethodKeepsTheSinkAndAShortChatPromptStillGetsAnAnswer) {
  const model::Model* m = model::testing::SharedDefaultModel();
  ASSERT_NE(m, nullptr);
  absl::StatusOr<eviction::EvictionProfile> profile =
      eviction::ResolveProfile("", kModule, m->fingerprint());
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_NE(profile->source(), "built-in") << "no committed profile beside " << kModule;
  ScorerCache scorers(kModule, *profile);
  const model::Tokenizer& tok = m->tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode(tok.ApplyChatTemplate({{"user", "What is the capital of France?"}}, true));
  for (const char* method :
       {"snapkv", "pyramidkv", "streamingllm", "h2o", "expected_attention", "defensivekv", "cake",
        "lookahead", "kvzip_gate", "trimkv_gate", "retention_global", "foresightkv"}) {
    SCOPED_TRACE(method);
    absl::StatusOr<eviction::MethodSettings> settings = profile->For(method);
    ASSERT_TRUE(settings.ok()) << settings.status();
    EXPECT_GE(settings->sinks, 4);
    absl::StatusOr<Policy> policy = ParsePolicy(method, 0.2, "fp16");
    ASSERT_TRUE(policy.ok()) << policy.status();
    absl::StatusOr<Method> chosen = scorers.For(*policy);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    model::Sequence session(*m, model::testing::SharedPool());
    absl::StatusOr<PolicyPrefill> prefill =
        PrefillTurn(session, prompt, *chosen, *policy, PrefillLimits{.recall_share = 0});
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    auto sampler = model::Sampler::Create({});
    absl::StatusOr<model::GenerationResult> r =
        model::DecodeFrom(session, *sampler, prefill->logits, 4, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->tokens.empty()) << "the turn ended at its first token";
  }
}

}  // namespace
}  // namespace glimpse::worker

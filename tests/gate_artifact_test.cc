// The committed learned scorers of the default model (models/lookahead/*.{kvzip_gate,trimkv_gate,
// retention_global,foresightkv}.safetensors, trained by tools/gates/train.py and
// tools/foresight/train.py) against PyTorch: the same files run through transformers' own model
// and tools/gates/gates_lib.py or tools/foresight/foresight_lib.py (tools/gates/make_fixture.py →
// tests/fixtures/gates/smollm2_scores.json) and through Glimpse's prefill, which captures each
// layer's inputs (attention inputs; ForesightKV: keys, values and the last 32 queries), and its
// C++ scorers must give the same scores, element by element.
//
// Tolerance |ours − torch| ≤ 5e-4 + 1e-3·|torch|: the two runtimes' attention inputs differ in
// the last bits of fp32 (logits agree to ~4e-5) and the gates amplify them — TRIM-KV's score
// multiplies log β by the token's age (up to the prompt length), the global logit sums 576
// products, ForesightKV's first layer weighs attention probabilities by up to ~6e3 (its
// standardisation folded in). The measured worst case is printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/eviction/pipeline.h"
#include "core/eviction/profile.h"
#include "core/eviction/scorer.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction {
namespace {

const std::string kSource = GLIMPSE_SOURCE_DIR;
const std::string kModule = kSource + "/models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors";

nlohmann::json Fixture() {
  std::ifstream in(kSource + "/tests/fixtures/gates/smollm2_scores.json");
  EXPECT_TRUE(in.good()) << "missing tests/fixtures/gates/smollm2_scores.json";
  return nlohmann::json::parse(in);
}

class GateArtifactTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GateArtifactTest, ScoresMatchPyTorch) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const nlohmann::json gate = Fixture()["gates"][GetParam()];
  ScorerConfig config;
  config.method = GetParam();
  ASSERT_TRUE(AttachLearnedFiles(config, kModule).ok());  // the committed file, found by name
  EXPECT_EQ(config.weights_path, kSource + "/models/lookahead/" + gate["file"].get<std::string>());
  auto scorer = CreateScorer(config);
  ASSERT_TRUE(scorer.ok()) << scorer.status();
  for (const nlohmann::json& c : gate["cases"]) {
    const std::vector<int32_t> ids = c["token_ids"].get<std::vector<int32_t>>();
    const int64_t T = static_cast<int64_t>(ids.size());
    model::Sequence session(*model, model::testing::SharedPool());
    SelectionOptions keep_all;
    keep_all.budget_tokens = T;
    auto result = PrefillAndEvict(session, ids, **scorer, keep_all);
    ASSERT_TRUE(result.ok()) << result.status();
    const auto& expected = c["scores"];  // [layer][Hkv][T]
    ASSERT_EQ(result->scores.size(), expected.size());
    double worst = 0.0;
    int mismatches = 0;
    for (size_t l = 0; l < expected.size(); ++l) {
      ASSERT_EQ(result->scores[l].size(), expected[l].size());
      for (size_t h = 0; h < expected[l].size(); ++h) {
        for (int64_t j = 0; j < T; ++j) {
          const double want = expected[l][h][j].get<double>();
          const double got = result->scores[l][h][j];
          const double err = std::abs(got - want);
          worst = std::max(worst, err);
          if (err > 5e-4 + 1e-3 * std::abs(want) && ++mismatches <= 5) {
            ADD_FAILURE() << "layer " << l << " kv-head " << h << " key " << j << ": ours " << got
                          << ", torch " << want;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    std::printf("%s, %lld-token prompt: max |ours - torch| = %.3g\n", GetParam().c_str(),
                static_cast<long long>(T), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(CommittedGates, GateArtifactTest,
                         ::testing::Values("kvzip_gate", "trimkv_gate", "retention_global",
                                           "foresightkv"));

}  // namespace
}  // namespace glimpse::eviction

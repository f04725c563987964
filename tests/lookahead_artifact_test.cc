// The committed LookaheadKV module for the default model (models/lookahead/, trained by
// tools/lookahead/train.py) against PyTorch: the same module file run through transformers' own
// model (tools/lookahead/make_scores_fixture.py → tests/fixtures/lookahead/smollm2_scores.json)
// and through Glimpse's second pass must give the same scores, element by element, within
// |ours − torch| ≤ 1e-5 + 1e-3·|torch| (measured: at most 8.3e-7 with the F16 module; the runtime's
// logits match transformers fp32 to ~4e-5). This also checks that the LoRA's q/k rows, stored in
// Hugging Face's order, are permuted into the GGUF model's interleaved-RoPE order. A model the
// module was not trained for is refused with a message naming both fingerprints.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/eviction/lookahead_module.h"
#include "core/eviction/lookahead_pass.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction {
namespace {

const std::string kSource = GLIMPSE_SOURCE_DIR;

nlohmann::json Fixture() {
  std::ifstream in(kSource + "/tests/fixtures/lookahead/smollm2_scores.json");
  EXPECT_TRUE(in.good()) << "missing tests/fixtures/lookahead/smollm2_scores.json";
  return nlohmann::json::parse(in);
}

std::string ModulePath(const nlohmann::json& fixture) {
  return kSource + "/models/lookahead/" + fixture["module"].get<std::string>();
}

// The hyper-parameters train.py recorded in the JSON beside the module.
nlohmann::json TrainedWith(const std::string& module_path) {
  const std::string json_path = module_path.substr(0, module_path.rfind('.')) + ".json";
  std::ifstream in(json_path);
  EXPECT_TRUE(in.good()) << "missing " << json_path;
  return nlohmann::json::parse(in)["hyper_parameters"];
}

TEST(LookaheadArtifactTest, ScoresMatchPyTorch) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const nlohmann::json fixture = Fixture();
  auto module = LookaheadModule::Open(ModulePath(fixture));
  ASSERT_TRUE(module.ok()) << module.status();
  const nlohmann::json trained = TrainedWith(ModulePath(fixture));
  EXPECT_EQ((*module)->n_lookahead(), trained["n_lookahead"].get<int64_t>());
  EXPECT_EQ((*module)->rank(), trained["rank"].get<int64_t>());
  for (const nlohmann::json& c : fixture["cases"]) {
    const std::vector<int32_t> ids = c["token_ids"].get<std::vector<int32_t>>();
    const int64_t T = static_cast<int64_t>(ids.size());
    model::Sequence session(*model, model::testing::SharedPool());
    ASSERT_TRUE(session.Forward(ids).ok());
    auto scores = RunLookaheadPass(session, **module);
    ASSERT_TRUE(scores.ok()) << scores.status();
    const auto& expected = c["scores"];  // [layer][Hkv][T]
    ASSERT_EQ(scores->size(), expected.size());
    double worst = 0.0;
    int mismatches = 0;
    for (size_t l = 0; l < expected.size(); ++l) {
      for (size_t h = 0; h < expected[l].size(); ++h) {
        for (int64_t j = 0; j < T; ++j) {
          const double want = expected[l][h][j].get<double>();
          const double got = (*scores)[l][h * T + j];
          const double err = std::abs(got - want);
          worst = std::max(worst, err);
          if (err > 1e-5 + 1e-3 * std::abs(want) && ++mismatches <= 5) {
            ADD_FAILURE() << "layer " << l << " kv-head " << h << " key " << j << ": ours " << got
                          << ", torch " << want;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    std::printf("%lld-token prompt: max |ours - torch| = %.3g\n", static_cast<long long>(T), worst);
  }
}

TEST(LookaheadArtifactTest, AnotherModelIsRefused) {
  auto module = LookaheadModule::Open(ModulePath(Fixture()));
  ASSERT_TRUE(module.ok()) << module.status();
  auto tiny = model::Model::Load(kSource + "/tests/fixtures/tiny/llama3");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  auto adapter = (*module)->AdapterFor((*tiny)->config(), (*tiny)->fingerprint());
  ASSERT_FALSE(adapter.ok());
  EXPECT_EQ(adapter.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(adapter.status().message().find((*tiny)->fingerprint()), std::string::npos)
      << adapter.status();
  EXPECT_NE(adapter.status().message().find((*module)->base_fingerprint()), std::string::npos)
      << adapter.status();
}

}  // namespace
}  // namespace glimpse::eviction

// The ForesightKV scorer's contract beyond the PyTorch comparison (tests/gate_artifact_test.cc):
// which head's MLP a per-head view uses, and weight files and views it refuses with a message.
#include <cmath>
#include <string>
#include <vector>

#include "core/eviction/scorer.h"
#include "core/model/test_files.h"
#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

using model::testing::SafetensorsBuilder;

constexpr int64_t kLayers = 1, kHkv = 2, kHd = 2, kGroup = 1, kF = 2 * kHd + 8 * kGroup;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Weights whose MLPs ignore their input: kv-head h scores every entry 10·(h + 1).
SafetensorsBuilder ConstantWeights(float window = 2.0f) {
  SafetensorsBuilder b;
  b.Add("foresight.w1", "F32", {kLayers, kHkv, 16, kF},
        Bytes(std::vector<float>(kLayers * kHkv * 16 * kF, 0.0f)));
  b.Add("foresight.b1", "F32", {kLayers, kHkv, 16},
        Bytes(std::vector<float>(kLayers * kHkv * 16, 0.0f)));
  b.Add("foresight.w2", "F32", {kLayers, kHkv, 16},
        Bytes(std::vector<float>(kLayers * kHkv * 16, 0.0f)));
  b.Add("foresight.b2", "F32", {kLayers, kHkv}, Bytes({10.0f, 20.0f}));
  b.Add("foresight.window", "F32", {1}, Bytes({window}));
  return b;
}

absl::StatusOr<std::unique_ptr<Scorer>> Open(const SafetensorsBuilder& b) {
  const std::string path = model::testing::MakeTempDir("foresight") + "/w.safetensors";
  model::testing::WriteFile(path, b.Build());
  ScorerConfig config;
  config.method = "foresightkv";
  config.weights_path = path;
  return CreateScorer(config);
}

// One kv-head's view of T = 3 entries with W = 2 window queries.
struct View {
  std::vector<float> keys = {1, 0, 0, 1, 1, 1}, values = {1, 2, 3, 4, 5, 6};
  std::vector<float> queries = {1, 0, 0, 1};
  std::vector<int32_t> positions = {0, 1, 2};
  std::vector<float> inv_freq = {1.0f};
  LayerView Make(int32_t first_kv_head) const {
    LayerView view{.layer = 0,
                   .n_layers = kLayers,
                   .n_heads = kGroup,
                   .n_kv_heads = 1,
                   .head_dim = kHd,
                   .hidden = 4,
                   .n_tokens = 3,
                   .positions = positions.data(),
                   .keys = keys.data(),
                   .values = values.data(),
                   .window = 2,
                   .window_queries = queries.data(),
                   .rope_inv_freq = inv_freq.data()};
    view.first_kv_head = first_kv_head;
    return view;
  }
};

TEST(ForesightTest, APerHeadViewUsesItsKvHeadsMlp) {
  auto scorer = Open(ConstantWeights());
  ASSERT_TRUE(scorer.ok()) << scorer.status();
  EXPECT_EQ((*scorer)->window(), 2);
  const View v;
  for (int32_t h : {0, 1}) {
    std::vector<float> scores(3);
    ASSERT_TRUE((*scorer)->Score(v.Make(h), scores.data()).ok());
    for (float s : scores) EXPECT_FLOAT_EQ(s, 10.0f * (h + 1));
  }
  std::vector<float> scores(3);
  const absl::Status past = (*scorer)->Score(v.Make(2), scores.data());  // the model has 2
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("foresight.w1"), std::string::npos) << past;
}

TEST(ForesightTest, RefusesFilesWithMissingTensorsOrAWindowThatIsNotACount) {
  SafetensorsBuilder missing;
  missing.Add("foresight.w1", "F32", {kLayers, kHkv, 16, kF},
              Bytes(std::vector<float>(kLayers * kHkv * 16 * kF, 0.0f)));
  auto no_b1 = Open(missing);
  ASSERT_FALSE(no_b1.ok());
  EXPECT_NE(no_b1.status().message().find("foresight.b1"), std::string::npos) << no_b1.status();
  for (float window : {0.0f, 2.5f, NAN}) {
    auto bad = Open(ConstantWeights(window));
    ASSERT_FALSE(bad.ok()) << window;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace glimpse::eviction

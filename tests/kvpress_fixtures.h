// Reading the kvpress fixtures (tests/fixtures/kvpress/, tools/oracle/make_kvpress_fixtures.py and
// make_kvpress_e2e_fixtures.py) and the Glimpse settings that do what each press does (kvpress
// 0.5.5):
//   snapkv / pyramidkv  snapkv scorer with the fixture's window_size and kernel_size (W = 32,
//                       k = 5, avg pooling); sinks 0 (kvpress protects only the window, via max + 1
//                       scores; the pipeline makes the scorer's window the selection window).
//   adakv_snapkv        the same scorer, Granularity::kPerLayer with safeguard α = 0.2.
//   streamingllm        sinks 4, window 0: the scorer ranks recent entries highest.
//   expected_attention  sinks 4 (kvpress pads the 4 sinks with max + 1), window 0.
// Budget: kvpress keeps n_kept = int(T·(1 − ratio)) per head (truncation; per layer and kv-head
// on average for AdaKV), passed as budget_tokens, since our budget_ratio rounds to nearest.
// PyramidKV: schedule kPyramid with budget_ratio = 1 − ratio, so that it spreads the unrounded
// T·(1 − ratio) as kvpress's get_layer_budget does (selection.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse::testing {

// tests/fixtures/kvpress/<name>, parsed; a test failure and null when missing.
nlohmann::json ReadKvpressFixture(const std::string& name);

// Hex bitmask (byte i = positions 8i..8i+7, bit p % 8) → sorted positions.
std::vector<int32_t> DecodeKeptMask(const std::string& hex);

// The token ids of prompt `name` in prompts.json (a test failure and {} when absent).
std::vector<int32_t> KvpressPromptTokens(const nlohmann::json& prompts, const std::string& name);

// The scorer and selection that reproduce `method`'s press on a T-token prompt at `ratio`.
eviction::ScorerConfig KvpressScorer(const std::string& method, const nlohmann::json& settings);
eviction::SelectionOptions KvpressSelection(const std::string& method, double ratio, int64_t T);

// A parameterised suite over the default model, the shared thread pool and prompts.json, loaded
// once per suite.
template <typename Param>
class KvpressSuite : public ::testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    pool_ = &model::testing::SharedPool();
    prompts_ = new nlohmann::json(ReadKvpressFixture("prompts.json"));
  }
  static void TearDownTestSuite() {
    delete prompts_;
    prompts_ = nullptr;
  }

  static inline const model::Model* model_ = nullptr;
  static inline kernels::ThreadPool* pool_ = nullptr;
  static inline nlohmann::json* prompts_ = nullptr;
};

// The index of the largest logit (lowest on ties).
int32_t Argmax(const std::vector<float>& logits);

// max |ours − kvpress| over a fixture's recorded logits ({top_ids, top_logits, logsumexp,
// range}: kvpress's largest logits and the log-sum-exp over the vocabulary), as a share of the
// range of kvpress's logits.
double LogitsError(const std::vector<float>& ours, const nlohmann::json& theirs);

}  // namespace glimpse::testing

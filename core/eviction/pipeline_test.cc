// PrefillAndEvict on the real default model (make test fetches it), with test-local scorers so the
// pipeline is tested independently of the real ones: budgets, generation after a full-budget
// eviction, error handling, and the captured LayerView inputs against a direct recomputation.
#include "core/eviction/pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "kernels/attention_stats.h"
#include "kernels/ops.h"

namespace glimpse::eviction {
namespace {

constexpr uint32_t kAllNeeds = kHiddenStates | kKeys | kValues | kWindowQueries | kPreRopeQueries |
                               kAccumulatedAttention | kLayerWeights;

// Scores every entry by a fixed pseudo-random value (distinct per layer and head), so selection
// is non-trivial; optionally records a deep copy of each layer's view, or fails at one layer.
class TestScorer : public Scorer {
 public:
  TestScorer(uint32_t needs, int64_t window) : needs_(needs), window_(window) {}
  std::string_view name() const override { return "test"; }
  uint32_t needs() const override { return needs_; }
  int64_t window() const override { return window_; }
  absl::Status Score(const LayerView& view, float* scores) const override {
    if (view.layer == fail_at_layer) return absl::InternalError("scorer failed on purpose");
    std::mt19937 rng(1234 + view.layer);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t i = 0; i < view.n_kv_heads * view.n_tokens; ++i) scores[i] = u(rng);
    if (record_layer == view.layer) Record(view);
    return absl::OkStatus();
  }

  int32_t fail_at_layer = -1;
  int32_t record_layer = -1;
  // Copies of the recorded layer's inputs (empty when the pointer was null).
  mutable std::vector<float> hidden, keys, values, window_q, pre_rope_q, attention;
  mutable const model::LayerWeights* weights = nullptr;

 private:
  void Record(const LayerView& v) const {
    const int64_t T = v.n_tokens, hd = v.head_dim;
    auto copy = [](const float* p, int64_t n) {
      return p == nullptr ? std::vector<float>() : std::vector<float>(p, p + n);
    };
    hidden = copy(v.hidden_states, T * v.hidden);
    keys = copy(v.keys, v.n_kv_heads * T * hd);
    values = copy(v.values, v.n_kv_heads * T * hd);
    window_q = copy(v.window_queries, v.n_heads * v.window * hd);
    pre_rope_q = copy(v.pre_rope_queries, T * v.n_heads * hd);
    attention = copy(v.accumulated_attention, v.n_heads * T);
    weights = v.weights;
  }

  const uint32_t needs_;
  const int64_t window_;
};

// Hands one layer's activations to `on_layer` (a single-chunk pass gives the whole prompt).
class LayerRecorder : public model::LayerObserver {
 public:
  LayerRecorder(int32_t layer, std::function<void(const model::LayerActivations&)> on_layer)
      : layer_(layer), on_layer_(std::move(on_layer)) {}
  bool wants_pre_rope_queries() const override { return true; }
  void OnLayer(int32_t layer, const model::LayerActivations& a) override {
    if (layer == layer_) on_layer_(a);
  }

 private:
  const int32_t layer_;
  const std::function<void(const model::LayerActivations&)> on_layer_;
};

class PipelineTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    pool_ = &model::testing::SharedPool();
  }

  std::vector<int32_t> Prompt() const {
    return model_->tokenizer().Encode(
        "The lighthouse on Carrow Point was built in 1871 from granite quarried on the island. Its "
        "first keeper kept a logbook for thirty-two years, recording every ship that passed, the "
        "height of the waves and the colour of the evening sky. In 1987 the light was automated "
        "and the last keeper moved to the mainland, taking the logbooks with him. Question: who "
        "kept the logbook, and for how long?");
  }

  static const model::Model* model_;
  static kernels::ThreadPool* pool_;
};

const model::Model* PipelineTest::model_ = nullptr;
kernels::ThreadPool* PipelineTest::pool_ = nullptr;

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST_F(PipelineTest, FullBudgetKeepsEverythingAndGenerationIsBitIdentical) {
  const std::vector<int32_t> prompt = Prompt();
  model::Sequence plain(*model_, *pool_, {.prefill_chunk = 32});
  model::Sequence evicted(*model_, *pool_, {.prefill_chunk = 32});
  TestScorer scorer(kAllNeeds, 16);
  auto result = PrefillAndEvict(evicted, prompt, scorer, {.budget_ratio = 1.0});
  ASSERT_TRUE(result.ok()) << result.status();
  const int64_t T = static_cast<int64_t>(prompt.size());
  EXPECT_EQ(evicted.cache().TotalEntries(),
            T * model_->config().n_layers * model_->config().n_kv_heads);
  EXPECT_EQ(evicted.next_position(), T);

  auto logits = plain.Forward(prompt);
  ASSERT_TRUE(logits.ok());
  ASSERT_EQ(*logits, result->last_logits);  // bit-identical: the capture changes nothing
  std::vector<float> a = *logits, b = result->last_logits;
  for (int step = 0; step < 16; ++step) {
    const int32_t next = Argmax(a);
    ASSERT_EQ(next, Argmax(b)) << "step " << step;
    auto na = plain.Forward(std::span<const int32_t>(&next, 1));
    auto nb = evicted.Forward(std::span<const int32_t>(&next, 1));
    ASSERT_TRUE(na.ok() && nb.ok());
    a = *na;
    b = *nb;
    ASSERT_EQ(a, b) << "logits differ at step " << step;
  }
}

TEST_F(PipelineTest, KeptCountsEqualTheBudgetAndPositionsAreSorted) {
  const std::vector<int32_t> prompt = Prompt();
  const int64_t T = static_cast<int64_t>(prompt.size());
  model::Sequence session(*model_, *pool_, {.prefill_chunk = 24});
  TestScorer scorer(kKeys, /*window=*/8);  // the scorer's window overrides options.window
  const SelectionOptions options{.budget_tokens = 40, .sinks = 4, .window = 30};
  auto result = PrefillAndEvict(session, prompt, scorer, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const model::ModelConfig& c = model_->config();
  ASSERT_EQ(result->kept_positions.size(), static_cast<size_t>(c.n_layers));
  EXPECT_GE(result->prefill_seconds, 0.0);
  EXPECT_GE(result->scoring_seconds, 0.0);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    ASSERT_EQ(result->kept_positions[l].size(), static_cast<size_t>(c.n_kv_heads));
    for (int32_t h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<int32_t>& pos = result->kept_positions[l][h];
      ASSERT_EQ(pos.size(), 40u) << "layer " << l << " head " << h;
      EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
      EXPECT_EQ(std::adjacent_find(pos.begin(), pos.end()), pos.end());
      EXPECT_EQ(pos, session.cache().Read(l, h).positions);
      for (int32_t s = 0; s < 4; ++s) EXPECT_EQ(pos[s], s);                   // sinks
      for (int32_t w = 0; w < 8; ++w) EXPECT_EQ(pos[40 - 8 + w], T - 8 + w);  // scorer's window
    }
  }
  EXPECT_EQ(session.cache().TotalEntries(), 40 * c.n_layers * c.n_kv_heads);
  // Decoding continues after the prompt.
  const int32_t next = Argmax(result->last_logits);
  auto step = session.Forward(std::span<const int32_t>(&next, 1));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(session.next_position(), T + 1);
}

TEST_F(PipelineTest, ErrorsLeaveTheSessionEmpty) {
  const std::vector<int32_t> prompt = Prompt();
  model::Sequence session(*model_, *pool_, {.prefill_chunk = 32});
  TestScorer failing(kKeys | kAccumulatedAttention, 0);
  failing.fail_at_layer = 3;
  auto result = PrefillAndEvict(session, prompt, failing, {.budget_ratio = 0.5});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("layer 3"), std::string::npos) << result.status();
  EXPECT_EQ(session.next_position(), 0);
  EXPECT_EQ(session.cache().TotalEntries(), 0);

  TestScorer scorer(kKeys, 0);  // budget below sinks + window: Select fails after the prefill
  result = PrefillAndEvict(session, prompt, scorer, {.budget_tokens = 3, .sinks = 4, .window = 8});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(session.next_position(), 0);
  EXPECT_EQ(session.cache().TotalEntries(), 0);

  std::vector<int32_t> bad = prompt;  // an invalid token: the session's own error
  bad[5] = -1;
  result = PrefillAndEvict(session, bad, scorer, {.budget_ratio = 0.5});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session.cache().TotalEntries(), 0);

  TestScorer long_window(kWindowQueries, static_cast<int64_t>(prompt.size()) + 1);
  result = PrefillAndEvict(session, prompt, long_window, {.budget_ratio = 0.5});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session.next_position(), 0);

  // A session with history is a later turn (pipeline_history_test.cc); an error before its
  // prefill (here the session's own token check) leaves it as it was.
  ASSERT_TRUE(session.Forward(std::span(prompt).first(4)).ok());
  result = PrefillAndEvict(session, bad, scorer, {.budget_ratio = 0.5});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session.next_position(), 4);
  EXPECT_EQ(session.cache().TotalEntries(),
            4 * model_->config().n_layers * model_->config().n_kv_heads);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * (1.0f + std::fabs(want[i])))
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  }
}

TEST_F(PipelineTest, CapturedInputsMatchADirectRecomputation) {
  const std::vector<int32_t> prompt = Prompt();
  const model::ModelConfig& c = model_->config();
  const int64_t T = static_cast<int64_t>(prompt.size()), H = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t hd = c.head_dim, D = c.hidden, W = 16;
  const int32_t layer = 7;

  // The pipeline, prefilling in chunks of 24 (so the window and the attention span chunks).
  model::Sequence session(*model_, *pool_, {.prefill_chunk = 24});
  TestScorer scorer(kAllNeeds, W);
  scorer.record_layer = layer;
  ASSERT_TRUE(PrefillAndEvict(session, prompt, scorer, {.budget_ratio = 1.0}).ok());

  // The reference: one chunk for the whole prompt, activations copied straight from the hook.
  model::Sequence whole(*model_, *pool_, {.prefill_chunk = 4096});
  std::vector<float> xn, q, k, v, pre;
  int64_t n = 0;
  LayerRecorder rec(layer, [&](const model::LayerActivations& a) {
    n = a.n_tokens;
    xn.assign(a.xn, a.xn + n * D);
    q.assign(a.q, a.q + n * H * hd);
    k.assign(a.k, a.k + n * Hkv * hd);
    v.assign(a.v, a.v + n * Hkv * hd);
    pre.assign(a.pre_rope_q, a.pre_rope_q + n * H * hd);
  });
  ASSERT_TRUE(whole.Forward(prompt, false, &rec).ok());
  ASSERT_EQ(n, T);

  // Chunked and single-chunk passes agree to rounding (different GEMM shapes).
  const float tol = 2e-4f;
  ExpectNear(scorer.hidden, xn, tol, "hidden");
  ExpectNear(scorer.pre_rope_q, pre, tol, "pre-RoPE q");
  std::vector<float> want_k(Hkv * T * hd), want_v(Hkv * T * hd), want_wq(H * W * hd);
  for (int64_t h = 0; h < Hkv; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(&k[(t * Hkv + h) * hd], hd, &want_k[(h * T + t) * hd]);
      std::copy_n(&v[(t * Hkv + h) * hd], hd, &want_v[(h * T + t) * hd]);
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t w = 0; w < W; ++w) {
      std::copy_n(&q[((T - W + w) * H + h) * hd], hd, &want_wq[(h * W + w) * hd]);
    }
  }
  ExpectNear(scorer.keys, want_k, tol, "keys");
  ExpectNear(scorer.values, want_v, tol, "values");
  ExpectNear(scorer.window_q, want_wq, tol, "window queries");
  EXPECT_EQ(scorer.weights, &model_->weights().layers[layer]);

  // RoPE of the captured pre-RoPE queries with the session's inv_freq gives the window queries.
  std::vector<float> roped(scorer.pre_rope_q.end() - W * H * hd, scorer.pre_rope_q.end());
  std::vector<int32_t> pos(W);
  for (int64_t w = 0; w < W; ++w) pos[w] = static_cast<int32_t>(T - W + w);
  kernels::Rope(roped.data(), pos.data(), session.rope_inv_freq().data(), c.rope_style, W, H, hd);
  std::vector<float> roped_hw(H * W * hd);
  for (int64_t w = 0; w < W; ++w) {
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(&roped[(w * H + h) * hd], hd, &roped_hw[(h * W + w) * hd]);
    }
  }
  ExpectNear(roped_hw, scorer.window_q, 1e-5f, "RoPE(pre-RoPE q)");

  // Accumulated attention: the T × T causal softmax in double, summed over queries.
  std::vector<float> want_attn(H * T, 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kh = h / (H / Hkv);
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(i + 1);
      double max = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) {
          dot += double{q[(i * H + h) * hd + d]} * k[(j * Hkv + kh) * hd + d];
        }
        s[j] = dot * scale;
        max = std::max(max, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - max));
      for (int64_t j = 0; j <= i; ++j) want_attn[h * T + j] += static_cast<float>(s[j] / sum);
    }
  }
  ExpectNear(scorer.attention, want_attn, 1e-3f, "accumulated attention");
  double total = 0.0;  // every query row's probabilities sum to 1
  for (int64_t j = 0; j < T; ++j) total += scorer.attention[j];
  EXPECT_NEAR(total, static_cast<double>(T), 1e-3 * T);
}

TEST(AccumulateAttentionTest, MatchesTheReferenceOnOddSizes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int64_t hd : {8, 12, 64}) {
    for (auto [n_q, n_kv] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {19, 37}, {33, 133}}) {
      std::vector<float> q(n_q * hd), k(n_kv * hd), scratch(n_kv);
      for (float& x : q) x = 2.0f * n01(rng);
      for (float& x : k) x = 2.0f * n01(rng);
      std::vector<int32_t> q_pos(n_q), kv_pos(n_kv);
      for (int64_t j = 0; j < n_kv; ++j) kv_pos[j] = static_cast<int32_t>(j);
      std::shuffle(kv_pos.begin(), kv_pos.end(), rng);  // ragged: entries in any order
      for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(rng() % (n_kv + 1)) - 1;
      std::vector<float> got(n_kv, 0.5f), want(n_kv, 0.5f);
      kernels::AccumulateAttention(got.data(), q.data(), q_pos.data(), k.data(), kv_pos.data(),
                                   0.3f, n_q, n_kv, hd);
      kernels::AccumulateAttentionReference(want.data(), q.data(), q_pos.data(), k.data(),
                                            kv_pos.data(), 0.3f, scratch.data(), n_q, n_kv, hd);
      for (int64_t j = 0; j < n_kv; ++j) {
        ASSERT_NEAR(got[j], want[j], 1e-5f + 1e-5f * std::fabs(want[j]))
            << "hd " << hd << " n_q " << n_q << " n_kv " << n_kv << " j " << j;
        if (kv_pos[j] > *std::max_element(q_pos.begin(), q_pos.end())) {
          EXPECT_EQ(got[j], 0.5f);
        }
      }
    }
  }
}

}  // namespace
}  // namespace glimpse::eviction

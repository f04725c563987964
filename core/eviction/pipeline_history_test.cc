// PrefillAndEvict over a session with history (a later turn of a multi-turn session), on the tiny
// Llama-3 fixture (tests/fixtures/tiny/llama3: 2 layers, 4 query heads, 2 kv-heads, hd 16): kept
// and evicted entries against the cache just before eviction, a turn without eviction against a
// plain forward pass, two evicting turns in a row, a SnapKV window longer than the turn checked
// against a direct computation, the inputs a history cannot provide, and LookaheadKV's pass over a
// ragged cache against a joint pass.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/eviction/lookahead_module.h"
#include "core/eviction/lookahead_pass.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "gtest/gtest.h"
#include "kernels/quant.h"

namespace glimpse::eviction {
namespace {

const std::string kDir = std::string(GLIMPSE_SOURCE_DIR) + "/tests/fixtures/tiny/llama3";
constexpr int32_t kChunk = 8;  // prefill chunk of every session here (turns span chunks)

// Token ids of the tiny vocabulary (300), distinct per `seed`.
std::vector<int32_t> Tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + seed * 101 + 11) % 290 + 5);
  return t;
}

std::unique_ptr<Scorer> MustCreate(const std::string& method, int64_t window = 0,
                                   int64_t kernel = 0, const std::string& module_path = "") {
  ScorerConfig config;
  config.method = method;
  config.window = window;
  config.kernel = kernel;
  config.module_path = module_path;
  auto scorer = CreateScorer(config);
  EXPECT_TRUE(scorer.ok()) << scorer.status();
  return scorer.ok() ? *std::move(scorer) : nullptr;
}

// A scorer that only declares what it needs (for the precondition checks).
class NeedsScorer : public Scorer {
 public:
  NeedsScorer(std::string name, uint32_t needs) : name_(std::move(name)), needs_(needs) {}
  std::string_view name() const override { return name_; }
  uint32_t needs() const override { return needs_; }
  absl::Status Score(const LayerView& view, float* scores) const override {
    std::fill(scores, scores + view.n_kv_heads * view.n_tokens, 1.0f);
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  const uint32_t needs_;
};

// Hands one layer's activations of every chunk to `on_layer`.
class LayerRecorder : public model::LayerObserver {
 public:
  LayerRecorder(int32_t layer, std::function<void(const model::LayerActivations&)> on_layer)
      : layer_(layer), on_layer_(std::move(on_layer)) {}
  void OnLayer(int32_t layer, const model::LayerActivations& a) override {
    if (layer == layer_) on_layer_(a);
  }

 private:
  const int32_t layer_;
  const std::function<void(const model::LayerActivations&)> on_layer_;
};

using Cache = std::vector<std::vector<model::KvHead>>;  // [layer][kv_head]

Cache Snapshot(const model::Sequence& session) {
  const model::KvCache& c = session.cache();
  Cache out(c.n_layers());
  for (int32_t l = 0; l < c.n_layers(); ++l) {
    for (int32_t h = 0; h < c.n_kv_heads(); ++h) out[l].push_back(c.Read(l, h));
  }
  return out;
}

void ExpectSameHead(const model::KvHead& got, const model::KvHead& want, const std::string& what) {
  EXPECT_EQ(got.positions, want.positions) << what;
  EXPECT_EQ(got.keys, want.keys) << what;
  EXPECT_EQ(got.values, want.values) << what;
}

// The entries of `head` at `indices` (or at the others, with `complement`).
model::KvHead Pick(const model::KvHead& head, const std::vector<int64_t>& indices, bool complement,
                   int64_t hd) {
  model::KvHead out;
  for (int64_t j = 0; j < head.size(); ++j) {
    const bool in = std::binary_search(indices.begin(), indices.end(), j);
    if (in == complement) continue;
    out.keys.insert(out.keys.end(), head.keys.begin() + j * hd, head.keys.begin() + (j + 1) * hd);
    out.values.insert(out.values.end(), head.values.begin() + j * hd,
                      head.values.begin() + (j + 1) * hd);
    out.positions.push_back(head.positions[j]);
  }
  return out;
}

// Turn 1 evicted by SnapKV (W = 8, budget 20 of 40): the session and, per layer · Hkv + head, the
// entries it evicted (the cold tier recall draws on).
struct ColdSession {
  std::unique_ptr<model::Sequence> session;
  std::vector<model::KvHead> cold;
};

class PipelineHistoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = model::Model::Load(kDir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
  }
  static void TearDownTestSuite() { delete model_; }

  std::unique_ptr<model::Sequence> NewSession() {
    return std::make_unique<model::Sequence>(*model_, pool_,
                                             model::SequenceOptions{.prefill_chunk = kChunk});
  }

  // A session after turn 1: `n` tokens prefilled and evicted by SnapKV (W = 8) under AdaKV's
  // per-layer selection, so heads keep different counts and different positions.
  std::unique_ptr<model::Sequence> AfterTurnOne(int64_t n = 40) {
    auto session = NewSession();
    const auto snapkv = MustCreate("snapkv", 8);
    auto r =
        PrefillAndEvict(*session, Tokens(n, 1), *snapkv,
                        {.budget_tokens = 20, .sinks = 2, .granularity = Granularity::kPerLayer});
    EXPECT_TRUE(r.ok()) << r.status();
    return session;
  }

  ColdSession AfterTurnOneWithCold() {
    ColdSession out{.session = NewSession()};
    const auto snapkv = MustCreate("snapkv", 8);
    auto r =
        PrefillAndEvict(*out.session, Tokens(40, 1), *snapkv, {.budget_tokens = 20, .sinks = 2});
    EXPECT_TRUE(r.ok()) << r.status();
    for (auto& layer : r->evicted) {
      for (model::KvHead& head : layer) out.cold.push_back(std::move(head));
    }
    return out;
  }

  int32_t Hkv() const { return model_->config().n_kv_heads; }
  int32_t L() const { return model_->config().n_layers; }
  int64_t Hd() const { return model_->config().head_dim; }

  static model::Model* model_;
  kernels::ThreadPool pool_{2};
};

model::Model* PipelineHistoryTest::model_ = nullptr;

// (a) kept ∪ evicted = the entries before eviction, disjoint, with their keys, values, positions.
TEST_F(PipelineHistoryTest, KeptAndEvictedPartitionTheEntriesBeforeEviction) {
  auto session = AfterTurnOne();
  auto reference = AfterTurnOne();
  bool ragged = false;
  for (int32_t l = 0; l < L(); ++l) {
    ragged |= session->cache().size(l, 0) != session->cache().size(l, 1);
  }
  EXPECT_TRUE(ragged) << "turn 1 should leave heads of different lengths";
  const std::vector<int32_t> turn = Tokens(12, 2);
  ASSERT_TRUE(reference->Forward(turn).ok());
  const Cache before = Snapshot(*reference);  // the cache just before turn 2's eviction

  const auto h2o = MustCreate("h2o");
  constexpr int64_t kBudget = 24, kSinks = 2, kWindow = 4;
  auto r = PrefillAndEvict(*session, turn, *h2o,
                           {.budget_tokens = kBudget, .sinks = kSinks, .window = kWindow});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(session->next_position(), 52);
  ASSERT_EQ(r->scores.size(), static_cast<size_t>(L()));
  ASSERT_EQ(r->evicted.size(), static_cast<size_t>(L()));
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) {
      const std::string where = "layer " + std::to_string(l) + " kv-head " + std::to_string(h);
      const model::KvHead& all = before[l][h];
      const std::vector<int64_t>& kept = r->kept[l][h];
      const std::vector<float>& scores = r->scores[l][h];
      ASSERT_EQ(static_cast<int64_t>(scores.size()), all.size()) << where;
      ASSERT_EQ(static_cast<int64_t>(kept.size()), std::min(kBudget, all.size())) << where;
      EXPECT_TRUE(std::adjacent_find(kept.begin(), kept.end(), std::greater_equal<int64_t>()) ==
                  kept.end())
          << where;
      ExpectSameHead(session->cache().Read(l, h), Pick(all, kept, false, Hd()), where + " kept");
      ExpectSameHead(r->evicted[l][h], Pick(all, kept, true, Hd()), where + " evicted");
      EXPECT_EQ(r->kept_positions[l][h], session->cache().Read(l, h).positions) << where;
      EXPECT_EQ(r->evicted[l][h].size() + static_cast<int64_t>(kept.size()), all.size()) << where;
      // H2O: every new query's probabilities sum to 1 over the entries it sees (history + new).
      double total = 0.0;
      for (float s : scores) total += s;
      EXPECT_NEAR(total, static_cast<double>(turn.size()), 1e-4 * turn.size()) << where;
      // Outside the forced sinks and window, every kept score ranks at or above every evicted one.
      const int64_t T = all.size();
      float min_kept = INFINITY, max_evicted = -INFINITY;
      for (int64_t j = kSinks; j < T - kWindow; ++j) {
        if (std::binary_search(kept.begin(), kept.end(), j)) {
          min_kept = std::min(min_kept, scores[j]);
        } else {
          max_evicted = std::max(max_evicted, scores[j]);
        }
      }
      EXPECT_GE(min_kept, max_evicted) << where;
      for (int64_t j : {int64_t{0}, int64_t{1}, T - 4, T - 3, T - 2, T - 1}) {
        EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), j)) << where << " entry " << j;
      }
    }
  }
}

// (b) With a budget above every head's entries the turn is a plain forward pass over the history.
TEST_F(PipelineHistoryTest, NoEvictionEqualsAPlainForward) {
  auto session = AfterTurnOne();
  auto reference = AfterTurnOne();
  const std::vector<int32_t> turn = Tokens(13, 3);
  auto logits = reference->Forward(turn);
  ASSERT_TRUE(logits.ok());
  const auto snapkv = MustCreate("snapkv", 8);
  auto r = PrefillAndEvict(*session, turn, *snapkv, {.budget_tokens = 1000, .sinks = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->last_logits, *logits);  // bit-identical: the capture changes nothing
  EXPECT_EQ(session->next_position(), reference->next_position());
  const Cache want = Snapshot(*reference), got = Snapshot(*session);
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) {
      ExpectSameHead(got[l][h], want[l][h], "layer " + std::to_string(l));
      EXPECT_EQ(r->evicted[l][h].size(), 0);
      EXPECT_EQ(r->scores[l][h].size(), want[l][h].positions.size());
    }
  }
  // Decoding goes on identically.
  const int32_t next = 42;
  auto a = session->Forward(std::span<const int32_t>(&next, 1));
  auto b = reference->Forward(std::span<const int32_t>(&next, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

// (c) Two evicting turns after the first: positions stay strictly increasing per head, the
// session's position counts every token, and a ratio budget is a share of all tokens so far.
TEST_F(PipelineHistoryTest, TurnAfterTurnWithARatioBudget) {
  auto session = NewSession();
  const auto snapkv = MustCreate("snapkv", 8);
  const SelectionOptions options{.budget_ratio = 0.5, .sinks = 2};
  int64_t total = 0;
  for (int64_t n : {30, 10, 7}) {
    const int64_t history = session->cache().size(0, 0);
    auto r = PrefillAndEvict(*session, Tokens(n, static_cast<int32_t>(n)), *snapkv, options);
    ASSERT_TRUE(r.ok()) << r.status();
    total += n;
    EXPECT_EQ(session->next_position(), total);
    const int64_t budget = std::llround(0.5 * static_cast<double>(total));  // 15, 20, 24 (23.5)
    for (int32_t l = 0; l < L(); ++l) {
      for (int32_t h = 0; h < Hkv(); ++h) {
        const std::vector<int32_t> pos = session->cache().Read(l, h).positions;
        EXPECT_EQ(static_cast<int64_t>(pos.size()), std::min(budget, history + n)) << "n " << n;
        EXPECT_TRUE(std::adjacent_find(pos.begin(), pos.end(), std::greater_equal<int32_t>()) ==
                    pos.end());
        EXPECT_LT(pos.back(), total);
        EXPECT_EQ(pos.back(), total - 1);  // the window keeps the newest token
        EXPECT_EQ(pos[0], 0);              // and the sinks the first
        EXPECT_EQ(r->scores[l][h].size(), static_cast<size_t>(history + n));
      }
    }
  }
  // Decoding continues after every token of the conversation.
  const int32_t next = 7;
  ASSERT_TRUE(session->Forward(std::span<const int32_t>(&next, 1)).ok());
  EXPECT_EQ(session->next_position(), total + 1);
}

// (d) SnapKV with W = 16 on a 5-token turn: the 5 queries it has, checked against a direct
// computation of its formula (kernel 1, so no pooling): for entry j before the head's last W,
//   s[kv, j] = 1/G · Σ_g 1/W · Σ_{new query i} softmax over the entries i sees (q_i·k_j / √hd)
// and the last W entries score max + 1 and are kept.
TEST_F(PipelineHistoryTest, SnapKvWindowLongerThanTheTurn) {
  constexpr int64_t W = 16, N = 5;
  auto setup = [&] {
    auto s = NewSession();
    const auto snapkv = MustCreate("snapkv", W);
    EXPECT_TRUE(
        PrefillAndEvict(*s, Tokens(30, 4), *snapkv,
                        {.budget_tokens = 24, .sinks = 2, .granularity = Granularity::kPerLayer})
            .ok());
    return s;
  };
  auto session = setup();
  auto reference = setup();
  const std::vector<int32_t> turn = Tokens(N, 5);
  const int32_t layer = 1;
  const int64_t H = model_->config().n_heads, hd = Hd(), G = H / Hkv();
  std::vector<float> q;  // [N, H, hd] the turn's post-RoPE queries at `layer`
  LayerRecorder rec(layer, [&](const model::LayerActivations& a) {
    q.insert(q.end(), a.q, a.q + a.n_tokens * H * hd);
  });
  ASSERT_TRUE(reference->Forward(turn, false, &rec).ok());
  const Cache before = Snapshot(*reference);

  const auto snapkv = MustCreate("snapkv", W, /*kernel=*/1);
  auto r = PrefillAndEvict(*session, turn, *snapkv, {.budget_tokens = 22, .sinks = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  const int32_t P0 = 30;
  for (int32_t kv = 0; kv < Hkv(); ++kv) {
    const model::KvHead& head = before[layer][kv];
    const int64_t T = head.size();
    std::vector<double> want(T, 0.0);
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t i = 0; i < N; ++i) {
        const float* qi = &q[(i * H + kv * G + g) * hd];
        std::vector<double> logit(T, -INFINITY);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          if (head.positions[j] > P0 + i) continue;  // causal by position
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += double{qi[d]} * head.keys[j * hd + d];
          logit[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, logit[j]);
        }
        for (double& x : logit) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < T; ++j) want[j] += logit[j] / sum / W / G;
      }
    }
    const std::vector<float>& got = r->scores[layer][kv];
    ASSERT_EQ(static_cast<int64_t>(got.size()), T);
    float top = -INFINITY;
    for (int64_t j = 0; j < T - W; ++j) {
      EXPECT_NEAR(got[j], want[j], 1e-6 + 1e-4 * want[j]) << "kv-head " << kv << " entry " << j;
      top = std::max(top, got[j]);
    }
    for (int64_t j = T - W; j < T; ++j) EXPECT_EQ(got[j], top + 1.0f) << "window entry " << j;
    // The selection's window is the scorer's: the head's last W entries (history included).
    const std::vector<int32_t> kept = session->cache().Read(layer, kv).positions;
    for (int64_t j = T - W; j < T; ++j) {
      EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), head.positions[j])) << j;
    }
  }
}

// (e) Inputs only a prefill of the whole sequence has: FailedPrecondition, session unchanged.
TEST_F(PipelineHistoryTest, HistoryCannotFeedPrefillOnlyInputs) {
  auto session = AfterTurnOne();
  const Cache before = Snapshot(*session);
  const std::vector<int32_t> turn = Tokens(10, 6);
  struct Case {
    std::unique_ptr<Scorer> scorer;
    Schedule schedule;
    std::string input;
  };
  std::vector<Case> cases;
  cases.push_back({std::make_unique<NeedsScorer>("kvzip_gate", kHiddenStates), Schedule::kUniform,
                   "hidden states"});
  cases.push_back({MustCreate("expected_attention"), Schedule::kUniform, "pre-RoPE queries"});
  cases.push_back({MustCreate("defensivekv", 8), Schedule::kUniform, "weights"});
  cases.push_back({MustCreate("cake", 8), Schedule::kCake, "kCake"});
  for (const Case& c : cases) {
    auto r = PrefillAndEvict(*session, turn, *c.scorer,
                             {.budget_tokens = 20, .sinks = 2, .schedule = c.schedule});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find(std::string(c.scorer->name())), std::string_view::npos)
        << r.status();
    EXPECT_NE(r.status().message().find(c.input), std::string_view::npos) << r.status();
  }
  // A window longer than a head: InvalidArgument before the prefill.
  const auto wide = MustCreate("snapkv", 64);
  auto r = PrefillAndEvict(*session, turn, *wide, {.budget_tokens = 20});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(session->next_position(), 40);
  const Cache after = Snapshot(*session);
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) ExpectSameHead(after[l][h], before[l][h], "unchanged");
  }
  // CAKE's scores under another schedule need no layer preference: fine.
  const auto cake = MustCreate("cake", 8);
  auto ok = PrefillAndEvict(*session, turn, *cake, {.budget_tokens = 20, .sinks = 2});
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// (f) A turn needs at least one token.
TEST_F(PipelineHistoryTest, EmptyTurnIsInvalidArgument) {
  auto session = AfterTurnOne();
  const int64_t entries = session->cache().TotalEntries();
  const auto h2o = MustCreate("h2o");
  auto r = PrefillAndEvict(*session, {}, *h2o, {.budget_tokens = 20});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(session->next_position(), 40);
  EXPECT_EQ(session->cache().TotalEntries(), entries);
  auto empty = NewSession();
  r = PrefillAndEvict(*empty, {}, *h2o, {.budget_tokens = 20});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

// (g) LookaheadKV over a ragged history: the second pass equals one joint pass over the turn's
// tokens + the lookahead rows (adapter on those rows only) from the same history.
TEST_F(PipelineHistoryTest, LookaheadOverARaggedHistory) {
  const std::string module_path = kDir + "/lookahead.safetensors";
  const auto lookahead = MustCreate("lookahead", 0, 0, module_path);
  ASSERT_NE(lookahead, nullptr);
  const SelectionOptions turn_one{
      .budget_tokens = 16, .sinks = 2, .window = 4, .granularity = Granularity::kGlobal};
  auto setup = [&] {
    auto s = NewSession();
    EXPECT_TRUE(PrefillAndEvict(*s, Tokens(30, 7), *lookahead, turn_one).ok());
    return s;
  };
  auto session = setup();
  auto reference = setup();
  const std::vector<int32_t> turn = Tokens(8, 8);
  auto r =
      PrefillAndEvict(*session, turn, *lookahead, {.budget_tokens = 20, .sinks = 2, .window = 4});
  ASSERT_TRUE(r.ok()) << r.status();

  const LookaheadModule& module = *lookahead->lookahead_module();
  auto adapter = module.AdapterFor(model_->config(), model_->fingerprint());
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  const int64_t D = model_->config().hidden, N = static_cast<int64_t>(turn.size());
  const kernels::WeightView& e = model_->weights().token_embd;
  std::vector<float> rows(N * D);  // the turn's token embeddings, then the module's rows
  for (int64_t t = 0; t < N; ++t) {
    kernels::DequantizeRow(
        &rows[t * D],
        static_cast<const uint8_t*>(e.data) + turn[t] * kernels::RowBytes(e.type, e.cols), e.type,
        D);
  }
  rows.insert(rows.end(), module.embeddings().begin(), module.embeddings().end());
  const int32_t P = 38;
  const Cache before = [&] {  // the cache just before eviction: history + the turn
    auto copy = setup();
    EXPECT_TRUE(copy->Forward(turn).ok());
    return Snapshot(*copy);
  }();
  LookaheadAttentionObserver joint(*reference, P, module.n_lookahead());
  ASSERT_TRUE(
      reference
          ->ForwardEmbeddings(rows, {.lora = &*adapter, .lora_first_row = N, .observer = &joint})
          .ok());
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) {
      const model::KvHead& head = before[l][h];
      ASSERT_EQ(r->scores[l][h].size(), head.positions.size());
      float sum = 0.0f;
      for (int64_t j = 0; j < head.size(); ++j) {
        const float want = joint.scores()[l][h * P + head.positions[j]];
        EXPECT_NEAR(r->scores[l][h][j], want, 1e-5f + 1e-4f * want) << l << " " << h << " " << j;
        sum += r->scores[l][h][j];
      }
      EXPECT_GT(sum, 0.0f);
      EXPECT_LT(sum, 1.0f + 1e-5f);  // probabilities of the entries, not renormalised
      EXPECT_EQ(session->cache().size(l, h), std::min<int64_t>(20, head.size()));
    }
  }
  EXPECT_EQ(session->next_position(), P);
}

// (h) Recall with every cold entry a candidate and room for all: every head holds every position
// again, cold entries with the very keys and values turn 1 evicted.
TEST_F(PipelineHistoryTest, RecallWithRoomForEverythingBringsEveryColdEntryBack) {
  ColdSession s = AfterTurnOneWithCold();
  const std::vector<int32_t> turn = Tokens(12, 9);
  const auto snapkv = MustCreate("snapkv", 8);
  const RecallRequest recall{.cold = s.cold, .candidate_tokens = 1000, .page_tokens = 4};
  auto r = PrefillAndEvict(*s.session, turn, *snapkv, {.budget_tokens = 1000, .sinks = 2}, &recall);
  ASSERT_TRUE(r.ok()) << r.status();
  int64_t cold_entries = 0;
  for (const model::KvHead& c : s.cold) cold_entries += c.size();
  EXPECT_GT(cold_entries, 0);
  EXPECT_EQ(r->recall_candidates, cold_entries);
  EXPECT_EQ(r->recalled, cold_entries);
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) {
      const model::KvHead head = s.session->cache().Read(l, h);
      ASSERT_EQ(head.size(), 52);
      for (int32_t p = 0; p < 52; ++p) EXPECT_EQ(head.positions[p], p);
      const model::KvHead& cold = s.cold[l * Hkv() + h];
      for (int64_t j = 0; j < cold.size(); ++j) {
        const int32_t p = cold.positions[j];
        EXPECT_TRUE(std::equal(cold.keys.begin() + j * Hd(), cold.keys.begin() + (j + 1) * Hd(),
                               head.keys.begin() + p * Hd()));
        EXPECT_TRUE(std::equal(cold.values.begin() + j * Hd(), cold.values.begin() + (j + 1) * Hd(),
                               head.values.begin() + p * Hd()));
      }
    }
  }
}

// (i) Recall under a budget: candidates are whole pages of the cold entries, scored and selected
// with the head's own: kept ∪ evicted = history ∪ new ∪ the kept candidates, the losing ones are
// in neither (their cold tier still holds them), the budget holds, and the counts add up.
TEST_F(PipelineHistoryTest, RecallCandidatesCompeteForTheBudget) {
  ColdSession s = AfterTurnOneWithCold();
  auto plain = AfterTurnOneWithCold();
  const std::vector<int32_t> turn = Tokens(12, 9);
  ASSERT_TRUE(plain.session->Forward(turn).ok());
  const Cache before = Snapshot(*plain.session);  // history + new, without candidates
  const auto snapkv = MustCreate("snapkv", 8);
  constexpr int64_t kBudget = 24, kPage = 4;
  const RecallRequest recall{.cold = s.cold, .candidate_tokens = 6, .page_tokens = kPage};
  auto r =
      PrefillAndEvict(*s.session, turn, *snapkv, {.budget_tokens = kBudget, .sinks = 2}, &recall);
  ASSERT_TRUE(r.ok()) << r.status();
  int64_t candidates = 0, recalled = 0;
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) {
      const std::string where = "layer " + std::to_string(l) + " kv-head " + std::to_string(h);
      const model::KvHead& cold = s.cold[l * Hkv() + h];
      const std::vector<int32_t> kept = s.session->cache().Read(l, h).positions;
      const std::vector<int32_t>& evicted = r->evicted[l][h].positions;
      EXPECT_EQ(static_cast<int64_t>(kept.size()), kBudget) << where;
      EXPECT_EQ(r->evicted_scores[l][h].size(), evicted.size()) << where;
      // Scored: history, new and the candidates, two whole pages of 4 (6 asked for, 8 taken).
      const int64_t added = static_cast<int64_t>(r->scores[l][h].size()) - before[l][h].size();
      EXPECT_EQ(added, std::min<int64_t>(cold.size(), 2 * kPage)) << where;
      std::vector<int32_t> all = kept;
      all.insert(all.end(), evicted.begin(), evicted.end());
      std::sort(all.begin(), all.end());
      std::vector<int32_t> kept_candidates;
      std::set_difference(all.begin(), all.end(), before[l][h].positions.begin(),
                          before[l][h].positions.end(), std::back_inserter(kept_candidates));
      EXPECT_TRUE(std::includes(cold.positions.begin(), cold.positions.end(),
                                kept_candidates.begin(), kept_candidates.end()))
          << where;
      EXPECT_TRUE(
          std::includes(kept.begin(), kept.end(), kept_candidates.begin(), kept_candidates.end()))
          << where;
      EXPECT_TRUE(std::includes(all.begin(), all.end(), before[l][h].positions.begin(),
                                before[l][h].positions.end()))
          << where;
      std::vector<int32_t> cold_evicted;
      std::set_intersection(evicted.begin(), evicted.end(), cold.positions.begin(),
                            cold.positions.end(), std::back_inserter(cold_evicted));
      EXPECT_TRUE(cold_evicted.empty()) << where << ": a losing candidate is stored again";
      candidates += added;
      recalled += static_cast<int64_t>(kept_candidates.size());
    }
  }
  EXPECT_EQ(r->recall_candidates, candidates);
  EXPECT_EQ(r->recalled, recalled);
}

// (j) Bad recall requests fail before the prefill; the session is unchanged.
TEST_F(PipelineHistoryTest, BadRecallRequestsLeaveTheSessionUnchanged) {
  ColdSession s = AfterTurnOneWithCold();
  const Cache before = Snapshot(*s.session);
  const std::vector<int32_t> turn = Tokens(10, 6);
  const SelectionOptions options{.budget_tokens = 20, .sinks = 2};
  const auto h2o = MustCreate("h2o");
  RecallRequest recall{.cold = s.cold, .candidate_tokens = 8};
  auto r = PrefillAndEvict(*s.session, turn, *h2o, options, &recall);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("h2o"), std::string_view::npos) << r.status();

  const auto snapkv = MustCreate("snapkv", 8);
  std::vector<model::KvHead> few(s.cold.begin(), s.cold.begin() + 1);
  recall.cold = few;
  r = PrefillAndEvict(*s.session, turn, *snapkv, options, &recall);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();

  std::vector<model::KvHead> held = s.cold;  // a position the cache holds
  held[0] = Pick(s.session->cache().Read(0, 0), {0}, false, Hd());
  recall.cold = held;
  r = PrefillAndEvict(*s.session, turn, *snapkv, options, &recall);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("in the cache already"), std::string_view::npos);

  EXPECT_EQ(s.session->next_position(), 40);
  const Cache after = Snapshot(*s.session);
  for (int32_t l = 0; l < L(); ++l) {
    for (int32_t h = 0; h < Hkv(); ++h) ExpectSameHead(after[l][h], before[l][h], "unchanged");
  }
}

}  // namespace
}  // namespace glimpse::eviction

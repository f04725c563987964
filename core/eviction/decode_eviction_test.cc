// Decode-time eviction on the real default model: the bound it keeps, a budget that holds
// everything changes nothing, its first eviction equals the pipeline's eviction of the same tokens
// as a turn with history (two independent captures of the window queries), and the scorers and
// options it refuses. kvpress's DecodingPress checks the tokens a user gets (tests/
// kvpress_decode_test.cc).
#include "core/eviction/decode_eviction.h"

#include <string>
#include <tuple>
#include <vector>

#include "core/model/generator.h"
#include "core/model/sampler.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

class DecodeEvictionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    pool_ = &model::testing::SharedPool();
    prompt_ = model_->tokenizer().Encode(
        "<|im_start|>user\nTell me a long story about a lighthouse keeper who finds a map in a "
        "bottle, and what the map leads to.<|im_end|>\n<|im_start|>assistant\n");
  }

  std::unique_ptr<Scorer> Make(const std::string& method, int64_t window = 0) {
    ScorerConfig config;
    config.method = method;
    config.window = window;
    auto scorer = CreateScorer(config);
    EXPECT_TRUE(scorer.ok()) << scorer.status();
    return scorer.ok() ? std::move(*scorer) : nullptr;
  }

  // Greedy decoding of `max_tokens` after the prompt, with `observer` (may be null).
  std::vector<int32_t> Generate(model::Sequence& session, int32_t max_tokens,
                                model::DecodeObserver* observer) {
    auto logits = session.Forward(prompt_);
    EXPECT_TRUE(logits.ok()) << logits.status();
    auto greedy = model::Sampler::Create({});
    EXPECT_TRUE(greedy.ok());
    auto result = model::DecodeFrom(session, *greedy, *logits, max_tokens, {}, observer);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->tokens : std::vector<int32_t>();
  }

  static DecodeEvictionOptions Options(int64_t budget, int64_t interval,
                                       std::vector<EvictionResult>* results = nullptr) {
    DecodeEvictionOptions options;
    options.budget_tokens = budget;
    options.interval = interval;
    if (results != nullptr) {
      options.on_evicted = [results](EvictionResult&& r) { results->push_back(std::move(r)); };
    }
    return options;
  }

  void FirstEvictionEqualsPipeline(const Scorer& scorer, int64_t interval, float rtol);

  const model::Model* model_ = nullptr;
  kernels::ThreadPool* pool_ = nullptr;
  std::vector<int32_t> prompt_;
};

TEST_F(DecodeEvictionTest, HeadsNeverHoldMoreThanBudgetPlusInterval) {
  auto scorer = Make("streamingllm");
  constexpr int64_t kBudget = 48, kInterval = 8;
  model::Sequence session(*model_, *pool_);
  std::vector<EvictionResult> results;
  auto eviction =
      DecodeEviction::Create(session.model(), *scorer, Options(kBudget, kInterval, &results));
  ASSERT_TRUE(eviction.ok()) << eviction.status();
  const std::vector<int32_t> tokens = Generate(session, 64, eviction->get());
  ASSERT_FALSE(tokens.empty());
  ASSERT_FALSE(results.empty());
  EXPECT_EQ((*eviction)->stats().evictions, static_cast<int64_t>(results.size()));
  const model::KvCache& cache = session.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      EXPECT_LE(cache.size(l, h), kBudget + kInterval);
      // StreamingLLM: the 4 sinks and the most recent entries.
      const auto positions = cache.positions(l, h);
      for (int32_t p = 0; p < 4; ++p) EXPECT_EQ(positions[p], p);
      EXPECT_EQ(positions.back(), session.next_position() - 1);
    }
  }
  for (const EvictionResult& r : results) {
    for (const auto& layer : r.kept_positions) {
      for (const auto& head : layer) {
        ASSERT_EQ(static_cast<int64_t>(head.size()), kBudget);
        EXPECT_EQ(head.back() - head[4] + 1, kBudget - 4) << "the recent entries are contiguous";
      }
    }
    for (const auto& layer : r.evicted) {
      for (const model::KvHead& head : layer) EXPECT_GT(head.size(), 0);
    }
  }
}

TEST_F(DecodeEvictionTest, ABudgetThatHoldsEverythingChangesNothing) {
  auto scorer = Make("snapkv", 16);
  model::Sequence plain(*model_, *pool_);
  const std::vector<int32_t> expected = Generate(plain, 24, nullptr);
  model::Sequence session(*model_, *pool_);
  auto eviction = DecodeEviction::Create(session.model(), *scorer, Options(4096, 4));
  ASSERT_TRUE(eviction.ok()) << eviction.status();
  EXPECT_EQ(Generate(session, 24, eviction->get()), expected);
  EXPECT_EQ((*eviction)->stats().evictions, 0);
  EXPECT_EQ(session.cache().TotalEntries(), plain.cache().TotalEntries());
}

// The first eviction after N fed tokens scores what PrefillAndEvict scores when those N tokens are
// a turn over the prompt's history: the same entries, the window queries of the same tokens
// (captured here by position from the decode passes, there from the turn's chunk) for SnapKV,
// the same tokens' attention summed over every entry for H2O.
TEST_F(DecodeEvictionTest, FirstEvictionEqualsThePipelinesTurnWithHistory) {
  // Scores within 1e-5 (relative) of the pipeline's; H2O every 64 tokens adds its attention in
  // two parts (every 32 tokens) where the pipeline sums one chunk's 64 rows: 5e-5 (measured
  // 1.5e-5 on 2026-11-26).
  for (const auto& [method, window, interval, rtol] :
       {std::tuple<const char*, int64_t, int64_t, float>{"snapkv", 16, 20, 1e-5f},
        {"h2o", 0, 20, 1e-5f},
        {"h2o", 0, 64, 5e-5f}}) {
    SCOPED_TRACE(std::string(method) + " every " + std::to_string(interval));
    FirstEvictionEqualsPipeline(*Make(method, window), interval, rtol);
  }
}

void DecodeEvictionTest::FirstEvictionEqualsPipeline(const Scorer& scorer, int64_t interval,
                                                     float rtol) {
  const int64_t kInterval = interval;
  constexpr int64_t kBudget = 40;
  model::Sequence session(*model_, *pool_);
  std::vector<EvictionResult> results;
  auto eviction =
      DecodeEviction::Create(session.model(), scorer, Options(kBudget, kInterval, &results));
  ASSERT_TRUE(eviction.ok()) << eviction.status();
  const std::vector<int32_t> generated = Generate(session, kInterval + 1, eviction->get());
  ASSERT_EQ(generated.size(), static_cast<size_t>(kInterval + 1));
  ASSERT_EQ(results.size(), 1u);

  model::Sequence turn(*model_, *pool_);
  ASSERT_TRUE(turn.Forward(prompt_).ok());
  // The decode fed the prompt's logits' token first: generated[0 .. kInterval) went in.
  SelectionOptions selection;
  selection.budget_tokens = kBudget;
  auto expected = PrefillAndEvict(turn, std::span(generated).first(kInterval), scorer, selection);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(results[0].kept_positions, expected->kept_positions);
  for (size_t l = 0; l < expected->scores.size(); ++l) {
    for (size_t h = 0; h < expected->scores[l].size(); ++h) {
      const std::vector<float>& ours = results[0].scores[l][h];
      const std::vector<float>& theirs = expected->scores[l][h];
      ASSERT_EQ(ours.size(), theirs.size());
      for (size_t j = 0; j < ours.size(); ++j) {
        ASSERT_NEAR(ours[j], theirs[j], rtol * std::max(1.0f, std::fabs(theirs[j])))
            << "layer " << l << " head " << h << " entry " << j;
      }
    }
  }
}

// In a bounded pool of KIVI pages (sealed pages hold 64 rows in 4 bits; eviction moves rows out
// of them): the heads stay bounded, the pool never holds more than the bound's pages, and every
// evicted entry is handed back.
TEST_F(DecodeEvictionTest, KiviPagesInABoundedPoolStayWithinTheBudget) {
  auto scorer = Make("snapkv", 16);
  model::KvPool pool({.budget_bytes = int64_t{64} << 20,
                      .page_tokens = 64,
                      .head_dim = model_->config().head_dim});
  model::Sequence session(*model_, *pool_,
                          {.kv_pool = &pool, .kv_dtype = kernels::KvDType::kKivi4});
  std::vector<EvictionResult> results;
  auto eviction = DecodeEviction::Create(session.model(), *scorer, Options(96, 32, &results));
  ASSERT_TRUE(eviction.ok()) << eviction.status();
  const std::vector<int32_t> tokens = Generate(session, 160, eviction->get());
  ASSERT_GE(tokens.size(), 100u);
  ASSERT_FALSE(results.empty());
  const model::KvCache& cache = session.cache();
  int64_t evicted = 0;
  for (const EvictionResult& r : results) {
    for (const auto& layer : r.evicted) {
      for (const model::KvHead& head : layer) evicted += head.size();
    }
  }
  EXPECT_EQ(evicted, (*eviction)->stats().evicted_entries);
  EXPECT_EQ(cache.TotalEntries() + evicted,
            int64_t{cache.n_layers()} * cache.n_kv_heads() * session.next_position());
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) EXPECT_LE(cache.size(l, h), 96 + 32);
  }
}

TEST_F(DecodeEvictionTest, RefusesScorersWhoseInputsADecodeLacks) {
  model::Sequence session(*model_, *pool_);
  for (const char* method : {"expected_attention", "defensivekv"}) {
    auto scorer = Make(method);
    auto eviction = DecodeEviction::Create(session.model(), *scorer, Options(64, 32));
    EXPECT_EQ(eviction.status().code(), absl::StatusCode::kFailedPrecondition) << method;
    EXPECT_NE(eviction.status().message().find(method), std::string::npos);
  }
  auto snapkv = Make("snapkv", 32);
  DecodeEvictionOptions cake_options = Options(64, 32);
  cake_options.selection.schedule = Schedule::kCake;
  auto cake = DecodeEviction::Create(session.model(), *snapkv, cake_options);
  EXPECT_EQ(cake.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DecodeEvictionTest, RefusesABudgetBelowWhatIsAlwaysKept) {
  model::Sequence session(*model_, *pool_);
  auto snapkv = Make("snapkv", 32);
  auto low = DecodeEviction::Create(session.model(), *snapkv, Options(35, 32));  // 4 sinks + 32
  EXPECT_EQ(low.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(low.status().message().find("35"), std::string::npos);
  EXPECT_TRUE(DecodeEviction::Create(session.model(), *snapkv, Options(36, 32)).ok());
  auto zero = DecodeEviction::Create(session.model(), *snapkv, Options(64, 0));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glimpse::eviction

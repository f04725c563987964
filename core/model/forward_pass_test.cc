// Batched forward passes on the real default model: sequences run together compute what each
// computes alone; errors change no sequence.
#include "core/model/forward_pass.h"

#include <algorithm>
#include <cmath>

#include "core/model/sampler.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

int32_t Argmax(const std::vector<float>& x) {
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class ForwardPassTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    pool_ = &testing::SharedPool();
  }
  std::vector<int32_t> Prompt(const std::string& text) const {
    const Tokenizer& tok = model_->tokenizer();
    return tok.Encode(tok.ApplyChatTemplate({{"user", text}}, true));
  }
  static const Model* model_;
  static kernels::ThreadPool* pool_;
};

const Model* ForwardPassTest::model_ = nullptr;
kernels::ThreadPool* ForwardPassTest::pool_ = nullptr;

const char* const kTexts[] = {"What is the capital of France?",
                              "Name three primes and explain why each is prime.",
                              "Tell me a short story about a lighthouse keeper.", "Hi!"};

// Runs `steps` greedy decode steps of each sequence alone; returns each step's logits.
std::vector<std::vector<std::vector<float>>> DecodeAlone(
    const Model& model, kernels::ThreadPool& pool, const std::vector<std::vector<int32_t>>& prompts,
    int steps) {
  std::vector<std::vector<std::vector<float>>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Sequence s(model, pool);
    auto logits = s.Forward(prompts[i]);
    EXPECT_TRUE(logits.ok());
    for (int step = 0; step < steps && logits.ok(); ++step) {
      out[i].push_back(*logits);
      const int32_t next[] = {Argmax(*logits)};
      logits = s.Forward(next);
    }
  }
  return out;
}

// Greedy decode of sequences whose prompts were prefilled alone, then decoded in passes of all of
// them: 4 rows per pass, the row-by-row path, so every logit is the solo run's bit for bit.
TEST_F(ForwardPassTest, DecodeRowsOfManySequencesAreEachSequencesOwnBitForBit) {
  constexpr int kSequences = 4, kSteps = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSequences; ++i) prompts.push_back(Prompt(kTexts[i]));
  const auto alone = DecodeAlone(*model_, *pool_, prompts, kSteps);
  std::vector<std::unique_ptr<Sequence>> sequences;
  std::vector<std::vector<float>> logits;
  for (int i = 0; i < kSequences; ++i) {
    sequences.push_back(std::make_unique<Sequence>(*model_, *pool_));
    logits.push_back(*sequences.back()->Forward(prompts[i]));
  }
  ForwardPass pass(*model_, *pool_);
  std::vector<int32_t> next(kSequences);
  std::vector<BatchRows> rows(kSequences);
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kSequences; ++i) {
      EXPECT_EQ(logits[i], alone[i][step]) << "sequence " << i << " step " << step;
      next[i] = Argmax(logits[i]);
      rows[i] = {.sequence = sequences[i].get(), .tokens = std::span(&next[i], 1)};
    }
    auto out = pass.Run(rows);
    ASSERT_TRUE(out.ok()) << out.status();
    logits = *std::move(out);
  }
}

// Four sequences prefill together (prompts of different lengths in one pass of ~150 rows), then
// decode together: every logit within 1e-4 of the logit range of the solo run's, the same tokens.
TEST_F(ForwardPassTest, PrefillsOfDifferentLengthsInOnePassMatchTheSoloRuns) {
  constexpr int kSequences = 4, kSteps = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSequences; ++i) prompts.push_back(Prompt(kTexts[i]));
  const auto alone = DecodeAlone(*model_, *pool_, prompts, kSteps);
  std::vector<std::unique_ptr<Sequence>> sequences;
  std::vector<BatchRows> rows;
  for (int i = 0; i < kSequences; ++i) {
    sequences.push_back(std::make_unique<Sequence>(*model_, *pool_));
    rows.push_back({.sequence = sequences.back().get(), .tokens = prompts[i]});
  }
  ForwardPass pass(*model_, *pool_);
  auto logits = pass.Run(rows);
  ASSERT_TRUE(logits.ok()) << logits.status();
  std::vector<int32_t> next(kSequences);
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kSequences; ++i) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i << " step " << step);
      const auto [lo, hi] = std::minmax_element(alone[i][step].begin(), alone[i][step].end());
      EXPECT_LE(MaxAbsDiff((*logits)[i], alone[i][step]), 1e-4f * (*hi - *lo));
      next[i] = Argmax((*logits)[i]);
      EXPECT_EQ(next[i], Argmax(alone[i][step]));
      rows[i].tokens = std::span(&next[i], 1);
    }
    logits = pass.Run(rows);
    ASSERT_TRUE(logits.ok()) << logits.status();
  }
  for (int i = 0; i < kSequences; ++i) {
    EXPECT_EQ(sequences[i]->next_position(), static_cast<int32_t>(prompts[i].size()) + kSteps);
  }
}

// A pass with a bad item, or one whose entries the pool cannot hold, changes no sequence.
TEST_F(ForwardPassTest, AFailedPassLeavesEverySequenceAsItWas) {
  const std::vector<int32_t> a = Prompt(kTexts[0]), b = Prompt(kTexts[1]);
  KvPool pool({.page_tokens = 16, .head_dim = model_->config().head_dim});
  Sequence s1(*model_, *pool_, {.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16});
  Sequence s2(*model_, *pool_, {.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16});
  ASSERT_TRUE(s1.Forward(a).ok());
  const int64_t used = pool.stats().used_bytes;
  const std::vector<int32_t> bad = {1, model_->config().vocab_size};
  ForwardPass pass(*model_, *pool_);
  std::vector<BatchRows> rows = {{.sequence = &s1, .tokens = std::span(a).first(1)},
                                 {.sequence = &s2, .tokens = bad}};
  EXPECT_EQ(pass.Run(rows).status().code(), absl::StatusCode::kInvalidArgument);
  rows[1] = {.sequence = &s1, .tokens = b};
  EXPECT_EQ(pass.Run(rows).status().code(), absl::StatusCode::kInvalidArgument);  // twice s1
  EXPECT_EQ(s1.next_position(), static_cast<int32_t>(a.size()));
  EXPECT_EQ(pool.stats().used_bytes, used);

  // A pool with room for s1 and nothing more: s2's prompt fails, s1's decode row with it.
  const int64_t heads = int64_t{model_->config().n_layers} * model_->config().n_kv_heads;
  KvPool tight({.budget_bytes = 2 * heads * pool.PageBytes(kernels::KvDType::kF16),
                .page_tokens = 16,
                .head_dim = model_->config().head_dim});
  Sequence t1(*model_, *pool_, {.kv_pool = &tight, .kv_dtype = kernels::KvDType::kF16});
  Sequence t2(*model_, *pool_, {.kv_pool = &tight, .kv_dtype = kernels::KvDType::kF16});
  ASSERT_TRUE(t1.Forward(std::span(a).first(20)).ok());  // 2 pages per head: the budget
  rows = {{.sequence = &t1, .tokens = std::span(a).subspan(20, 1)}, {.sequence = &t2, .tokens = b}};
  EXPECT_EQ(pass.Run(rows).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t1.next_position(), 20);
  EXPECT_EQ(t1.cache().TotalEntries(), 20 * heads);
  EXPECT_EQ(t2.cache().TotalEntries(), 0);
  EXPECT_EQ(tight.stats().used_bytes, tight.stats().budget_bytes);
}

// A row set with input embeddings, an adapter on some rows and entries that leave afterwards
// (LookaheadKV's second pass) runs beside another sequence's decode row and gives what it gives
// alone; the observer sees only its own rows.
TEST_F(ForwardPassTest, EmbeddingRowsWithAnObserverRunBesideADecodeRow) {
  class Counting : public LayerObserver {
   public:
    void OnLayer(int32_t, const LayerActivations& a) override { rows += a.n_tokens; }
    int64_t rows = 0;
  };
  const std::vector<int32_t> a = Prompt(kTexts[0]), b = Prompt(kTexts[2]);
  const int64_t D = model_->config().hidden;
  std::vector<float> embeddings(5 * D);
  for (size_t i = 0; i < embeddings.size(); ++i) embeddings[i] = 0.01f * ((i % 17) - 8.0f);

  Sequence alone(*model_, *pool_);
  ASSERT_TRUE(alone.Forward(a).ok());
  auto want = alone.ForwardEmbeddings(embeddings, {.keep_entries = false, .all_logits = true});
  ASSERT_TRUE(want.ok());

  Sequence s1(*model_, *pool_), s2(*model_, *pool_);
  ASSERT_TRUE(s1.Forward(a).ok());
  ASSERT_TRUE(s2.Forward(b).ok());
  Counting seen;
  const int32_t next[] = {7};
  const std::vector<BatchRows> rows = {
      {.sequence = &s1,
       .embeddings = embeddings,
       .call = {.keep_entries = false, .all_logits = true, .observer = &seen}},
      {.sequence = &s2, .tokens = next}};
  ForwardPass pass(*model_, *pool_);
  auto got = pass.Run(rows);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ((*got)[0].size(), want->size());
  EXPECT_EQ((*got)[0], *want);  // 6 rows: the dot-product path, row by row
  EXPECT_EQ(seen.rows, 5 * model_->config().n_layers);
  EXPECT_EQ(s1.next_position(), static_cast<int32_t>(a.size()));  // the entries left again
  EXPECT_EQ(s2.next_position(), static_cast<int32_t>(b.size()) + 1);
}

}  // namespace
}  // namespace glimpse::model

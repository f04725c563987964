// Sequence tests on the real default model (make test fetches it before running the suite).
#include "core/model/sequence.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

class SequenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    pool_ = &model::testing::SharedPool();
  }

  std::vector<int32_t> Prompt() const {
    return model_->tokenizer().Encode(
        "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on the Moon, "
        "and two astronauts walked on its surface.");
  }

  static const Model* model_;
  static kernels::ThreadPool* pool_;
};

const Model* SequenceTest::model_ = nullptr;
kernels::ThreadPool* SequenceTest::pool_ = nullptr;

float MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

int32_t Argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST_F(SequenceTest, ChunkedPrefillEqualsOneChunk) {
  const auto prompt = Prompt();
  Sequence whole(*model_, *pool_);
  Sequence chunked(*model_, *pool_, {.prefill_chunk = 7});
  auto a = whole.Forward(prompt, /*all_logits=*/true);
  auto b = chunked.Forward(prompt, /*all_logits=*/true);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), prompt.size() * model_->config().vocab_size);
  // Same fp32 arithmetic per row; only sgemm blocking differs.
  EXPECT_LT(MaxAbsDiff(*a, *b), 1e-3f);
  EXPECT_EQ(whole.next_position(), static_cast<int32_t>(prompt.size()));
  EXPECT_EQ(whole.cache().size(0, 0), static_cast<int64_t>(prompt.size()));
}

TEST_F(SequenceTest, DecodeStepAgreesWithPrefill) {
  const auto prompt = Prompt();
  Sequence prefill(*model_, *pool_);
  auto full = prefill.Forward(prompt);
  ASSERT_TRUE(full.ok());

  Sequence decode(*model_, *pool_);
  ASSERT_TRUE(decode.Forward(std::span(prompt).first(prompt.size() - 1)).ok());
  auto last = decode.Forward(std::span(prompt).last(1));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(Argmax(*last), Argmax(*full));
  // Decode quantises activations to Q8_0 (as llama.cpp does); prefill runs fp32 activations.
  const auto [lo, hi] = std::minmax_element(full->begin(), full->end());
  EXPECT_LT(MaxAbsDiff(*last, *full), 0.02f * (*hi - *lo));
}

TEST_F(SequenceTest, RetainingEveryEntryIsBitIdentical) {
  const auto prompt = Prompt();
  Sequence plain(*model_, *pool_), retained(*model_, *pool_);
  ASSERT_TRUE(plain.Forward(prompt).ok());
  ASSERT_TRUE(retained.Forward(prompt).ok());
  KvCache& cache = retained.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      std::vector<int64_t> all(cache.size(l, h));
      std::iota(all.begin(), all.end(), 0);
      ASSERT_TRUE(cache.Retain(l, h, all).ok());
    }
  }
  const int32_t next[] = {Argmax(*plain.Forward(std::span(prompt).last(1)))};
  auto a = plain.Forward(next);
  auto b = retained.Forward(std::span(prompt).last(1));
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = retained.Forward(next);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*a, *c);
}

TEST_F(SequenceTest, EvictingEntriesChangesOnlyWhatAttentionSees) {
  const auto prompt = Prompt();
  Sequence full(*model_, *pool_), evicted(*model_, *pool_);
  ASSERT_TRUE(full.Forward(prompt).ok());
  ASSERT_TRUE(evicted.Forward(prompt).ok());
  // Keep a different half of the entries in every head (ragged across heads).
  KvCache& cache = evicted.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      std::vector<int64_t> keep;
      for (int64_t i = 0; i < cache.size(l, h); ++i) {
        if (i < 4 || (i + h + l) % 2 == 0) keep.push_back(i);
      }
      ASSERT_TRUE(cache.Retain(l, h, keep).ok());
    }
  }
  EXPECT_LT(cache.TotalEntries(), full.cache().TotalEntries());
  const int32_t next[] = {42};
  auto a = full.Forward(next), b = evicted.Forward(next);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(MaxAbsDiff(*a, *b), 0.0f);
  EXPECT_EQ(evicted.next_position(), full.next_position());
}

TEST_F(SequenceTest, BadInputIsRejectedAndLeavesTheSequenceUnchanged) {
  Sequence sequence(*model_, *pool_, {.max_context = 16});
  ASSERT_TRUE(sequence.Forward(std::vector<int32_t>{1, 2, 3}).ok());

  const std::vector<int32_t> out_of_range = {5, model_->config().vocab_size};
  auto status = sequence.Forward(out_of_range).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("token id 49152 at index 1"), std::string::npos) << status;

  status = sequence.Forward(std::vector<int32_t>(14, 7)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("exceeds the context length 16"), std::string::npos) << status;

  EXPECT_EQ(sequence.Forward(std::vector<int32_t>{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sequence.next_position(), 3);
  EXPECT_EQ(sequence.cache().size(0, 0), 3);
  EXPECT_TRUE(sequence.Forward(std::vector<int32_t>(13, 7)).ok());
}

// A sequence's KV in a pool of fp16 pages: attention reads the pages as they are; the logits move
// by what fp16 storage costs, and a pool too small for a prompt is a clear error that leaves the
// sequence as it was.
TEST_F(SequenceTest, Fp16PagesInASharedPoolStayCloseAndAFullPoolIsAClearError) {
  const auto prompt = Prompt();
  KvPool pool({.page_tokens = 16, .head_dim = model_->config().head_dim});
  Sequence fp32(*model_, *pool_),
      fp16(*model_, *pool_, {.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16});
  auto a = fp32.Forward(prompt), b = fp16.Forward(prompt);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  const auto [lo, hi] = std::minmax_element(a->begin(), a->end());
  EXPECT_LT(MaxAbsDiff(*a, *b), 2e-3f * (*hi - *lo));
  EXPECT_GT(MaxAbsDiff(*a, *b), 0.0f);
  EXPECT_EQ(fp16.cache().dtype(), kernels::KvDType::kF16);
  EXPECT_EQ(fp16.cache().TotalBytes(), pool.stats().used_bytes);

  const int64_t heads = int64_t{model_->config().n_layers} * model_->config().n_kv_heads;
  KvPool tight({.budget_bytes = heads * pool.PageBytes(kernels::KvDType::kF16),
                .page_tokens = 16,
                .head_dim = model_->config().head_dim});
  Sequence s(*model_, *pool_, {.kv_pool = &tight, .kv_dtype = kernels::KvDType::kF16});
  ASSERT_TRUE(s.Forward(std::span(prompt).first(16)).ok());  // one page per head: the budget
  const auto full = s.Forward(std::span(prompt).subspan(16, 1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_EQ(s.next_position(), 16);
  EXPECT_EQ(s.cache().TotalEntries(), 16 * heads);
  EXPECT_EQ(tight.stats().used_bytes, tight.stats().budget_bytes);
}

}  // namespace
}  // namespace glimpse::model

// The model runtime on a GPU (core/model/cuda) against transformers itself: the tiny checkpoints of
// tests/fixtures/tiny/ (tools/oracle/make_tiny_models.py: Llama-3 rope scaling, Qwen2 biases and
// tied embeddings, Qwen3 q/k norms) through device prefill and batched device decode, compared with
// transformers' fp32 logits and greedy continuation. Skips, saying so, without a CUDA device;
// tools/device/check_cuda.sh runs it on one.
//
// Tolerance: the device rounds weights and matrix-product activations to fp16 (device_model.h), so
// logits may differ from fp32 by about 2⁻¹¹ of the activations' size per product; the tests demand
// 1 % of the golden logit range, print what they measured, and demand exact greedy tokens only
// where the fixture's top-1 margin is larger than twice the measured error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/kvpage/codec.h"
#include "core/model/cuda/device_generate.h"
#include "core/model/cuda/device_model.h"
#include "core/model/kv_pool.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kv_cache.h"
#include "tests/golden_fixtures.h"

namespace glimpse {
namespace {

using model::Model;
using model::cuda::DeviceModel;
using model::cuda::DeviceRunner;
using model::cuda::DeviceSequence;

constexpr float kRelativeTolerance = 1e-2f;

// max |ours − golden| and the golden's range (testing::CompareLogits), for structured bindings.
std::pair<float, float> MaxDiff(const std::vector<float>& ours, const std::vector<float>& golden,
                                size_t offset = 0) {
  const testing::LogitsDiff d = testing::CompareLogits(ours, golden, offset);
  return {d.max_abs, d.range};
}

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (kernels::cuda::DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device here; tools/device/check_cuda.sh runs these on a GPU";
    }
    auto golden = testing::LoadTinyModelGolden(GetParam());
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
    auto model = Model::Load(testing::TinyModelDir(GetParam()));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto device = DeviceModel::Upload(*model_);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    auto runner = DeviceRunner::Create(*device_);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = *std::move(runner);
  }

  std::unique_ptr<DeviceSequence> NewSequence() {
    auto seq = DeviceSequence::Create(*device_, 64);
    EXPECT_TRUE(seq.ok()) << seq.status();
    return seq.ok() ? *std::move(seq) : nullptr;
  }

  testing::TinyModelGolden golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DeviceModel> device_;
  std::unique_ptr<DeviceRunner> runner_;
};

TEST_P(CudaModelTest, PrefillLogitsMatchTransformersFp32) {
  auto seq = NewSequence();
  ASSERT_NE(seq, nullptr);
  auto logits = runner_->Prefill(*seq, golden_.token_ids, /*all_logits=*/true);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->size(), golden_.logits.size());
  const auto [diff, range] = MaxDiff(*logits, golden_.logits);
  std::printf("[ logits ] %s device prefill: max |ours − transformers| = %.3g (range %.2f, %.2g)\n",
              GetParam().c_str(), diff, range, diff / range);
  EXPECT_LE(diff, kRelativeTolerance * range);
  EXPECT_EQ(seq->length(), static_cast<int64_t>(golden_.token_ids.size()));
}

// A chunked prefill, then one decode step per token, reads K and V back from the device cache
// (prefill attention over the cache, then paged decode attention).
TEST_P(CudaModelTest, ChunkedPrefillAndDecodeStepsMatchTransformersFp32) {
  auto seq = NewSequence();
  ASSERT_NE(seq, nullptr);
  const std::vector<int32_t>& ids = golden_.token_ids;
  const size_t vocab = golden_.vocab_size;
  float worst = 0, range = 0;
  for (size_t begin = 0; begin < 13; begin += 5) {  // chunks of 5, 5, 3
    const size_t n = std::min<size_t>(5, 13 - begin);
    auto logits = runner_->Prefill(*seq, std::span(ids).subspan(begin, n), /*all_logits=*/true);
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::tie(worst, range) = MaxDiff(*logits, golden_.logits, begin * vocab);
    EXPECT_LE(worst, kRelativeTolerance * range) << "chunk at " << begin;
  }
  DeviceSequence* const seqs[] = {seq.get()};
  for (size_t t = 13; t < ids.size(); ++t) {
    auto step = runner_->Decode(seqs, std::span(ids).subspan(t, 1));
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->size(), vocab);
    const auto [d, r] = MaxDiff(*step, golden_.logits, t * vocab);
    EXPECT_LE(d, kRelativeTolerance * r) << "decode step at position " << t;
    worst = std::max(worst, d);
  }
  std::printf("[ logits ] %s device chunked + decode: max |ours − transformers| = %.3g (%.2g)\n",
              GetParam().c_str(), worst, worst / range);
}

TEST_P(CudaModelTest, GreedyTokensMatchTransformers) {
  auto seq = NewSequence();
  ASSERT_NE(seq, nullptr);
  auto sampler = model::Sampler::Create({});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  auto result = model::cuda::Generate(*runner_, *seq, *sampler, golden_.token_ids,
                                      static_cast<int32_t>(golden_.greedy.size()));
  ASSERT_TRUE(result.ok()) << result.status();
  std::printf("[ greedy ] %s: fixture's smallest top-1 margin %.3g\n", GetParam().c_str(),
              golden_.greedy_min_margin);
  EXPECT_EQ(result->stop, model::StopReason::kMaxTokens);
  EXPECT_EQ(result->tokens, golden_.greedy);
}

// Generation stops, as on the CPU, when the sequence's cache is full.
TEST_P(CudaModelTest, GenerationStopsWhenTheSequenceIsFull) {
  const auto prompt = static_cast<int64_t>(golden_.token_ids.size());
  auto seq = DeviceSequence::Create(*device_, prompt + 3);
  ASSERT_TRUE(seq.ok()) << seq.status();
  auto sampler = model::Sampler::Create({});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  auto result = model::cuda::Generate(*runner_, **seq, *sampler, golden_.token_ids, 10);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stop, model::StopReason::kContextFull);
  EXPECT_EQ(result->tokens.size(), 4u);  // three fed, the fourth sampled into a full cache
  EXPECT_EQ((*seq)->length(), prompt + 3);
}

// 32 sequences of different lengths decoded together give each one's tokens and logits alone.
TEST_P(CudaModelTest, ABatchOf32SequencesEqualsEachRunAlone) {
  constexpr int kSequences = 32, kSteps = 6;
  const int64_t vocab = golden_.vocab_size;
  const std::vector<int32_t>& ids = golden_.token_ids;
  std::vector<std::unique_ptr<DeviceSequence>> batch, alone;
  std::vector<int32_t> next;
  for (int i = 0; i < kSequences; ++i) {
    const size_t len = 2 + i % (ids.size() - 2);
    for (auto* group : {&batch, &alone}) {
      group->push_back(NewSequence());
      ASSERT_NE(group->back(), nullptr);
      auto logits = runner_->Prefill(*group->back(), std::span(ids).first(len));
      ASSERT_TRUE(logits.ok()) << logits.status();
      if (group == &batch) next.push_back(Argmax(logits->data(), vocab));
    }
  }
  std::vector<DeviceSequence*> seqs;
  for (auto& s : batch) seqs.push_back(s.get());
  std::vector<int32_t> alone_next = next;
  float worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    auto together = runner_->Decode(seqs, next);
    ASSERT_TRUE(together.ok()) << together.status();
    for (int i = 0; i < kSequences; ++i) {
      DeviceSequence* const one[] = {alone[i].get()};
      auto solo = runner_->Decode(one, std::span(alone_next).subspan(i, 1));
      ASSERT_TRUE(solo.ok()) << solo.status();
      const std::vector<float> row(together->begin() + i * vocab,
                                   together->begin() + (i + 1) * vocab);
      const auto [d, range] = MaxDiff(row, *solo);
      worst = std::max(worst, d / range);
      EXPECT_LE(d, 1e-3f * range) << "sequence " << i << " step " << step;
      next[i] = Argmax(row.data(), vocab);
      alone_next[i] = Argmax(solo->data(), vocab);
    }
    EXPECT_EQ(next, alone_next) << "step " << step;
  }
  std::printf("[ batch  ] %s: 32 sequences together vs alone, max diff %.2g of the range\n",
              GetParam().c_str(), worst);
}

// An int8 KV cache on the device against the CPU runtime with an int8 cache in its page pool (the
// same codec): chunked prefill, then decode steps, each compared with transformers' fp32 logits.
// The device may lose no more than the CPU's int8 cache does plus the fp16 path's own tolerance
// (its activations can move a code by one step where the CPU's fp32 ones do not).
TEST_P(CudaModelTest, Int8CacheLosesNoMoreThanTheCpuRuntimesInt8Cache) {
  auto seq = DeviceSequence::Create(*device_, 64, kernels::KvDType::kI8);
  ASSERT_TRUE(seq.ok()) << seq.status();
  kernels::ThreadPool pool(1);
  model::KvPool kv_pool({.page_tokens = 64, .head_dim = model_->config().head_dim});
  model::Sequence cpu(*model_, pool, {.kv_pool = &kv_pool, .kv_dtype = kernels::KvDType::kI8});
  const std::vector<int32_t>& ids = golden_.token_ids;
  const size_t vocab = golden_.vocab_size;
  DeviceSequence* const seqs[] = {seq->get()};
  float device_error = 0, cpu_error = 0, between = 0, range = 0;
  auto compare = [&](const std::vector<float>& ours, const std::vector<float>& theirs,
                     size_t first) {
    const auto [d, r] = MaxDiff(ours, golden_.logits, first * vocab);
    device_error = std::max(device_error, d);
    range = r;
    cpu_error = std::max(cpu_error, MaxDiff(theirs, golden_.logits, first * vocab).first);
    between = std::max(between, MaxDiff(ours, theirs).first);
  };
  for (const auto& [first, n] : {std::pair<size_t, size_t>{0, 7}, {7, 6}}) {
    auto ours = runner_->Prefill(**seq, std::span(ids).subspan(first, n), /*all_logits=*/true);
    auto theirs = cpu.Forward(std::span(ids).subspan(first, n), /*all_logits=*/true);
    ASSERT_TRUE(ours.ok() && theirs.ok()) << ours.status() << theirs.status();
    compare(*ours, *theirs, first);
  }
  for (size_t t = 13; t < ids.size(); ++t) {
    auto ours = runner_->Decode(seqs, std::span(ids).subspan(t, 1));
    auto theirs = cpu.Forward(std::span(ids).subspan(t, 1));
    ASSERT_TRUE(ours.ok() && theirs.ok()) << ours.status() << theirs.status();
    compare(*ours, *theirs, t);
  }
  std::printf(
      "[ int8   ] %s: max |logit − transformers fp32|: device int8 %.3g, CPU int8 %.3g (range "
      "%.2f); device vs CPU %.3g\n",
      GetParam().c_str(), device_error, cpu_error, range, between);
  EXPECT_GT(cpu_error, 1e-3f * range) << "the CPU cache is not int8";
  EXPECT_LE(device_error, cpu_error + kRelativeTolerance * range);
}

TEST_P(CudaModelTest, BadCallsAreRefusedAndLeaveTheSequenceAsItWas) {
  auto seq = NewSequence();
  ASSERT_NE(seq, nullptr);
  const int32_t bad[] = {1, static_cast<int32_t>(golden_.vocab_size)};
  EXPECT_EQ(runner_->Prefill(*seq, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner_->Prefill(*seq, {}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> too_many(65, 1);
  EXPECT_EQ(runner_->Prefill(*seq, too_many).status().code(), absl::StatusCode::kResourceExhausted);
  DeviceSequence* const twice[] = {seq.get(), seq.get()};
  const int32_t two[] = {1, 2};
  EXPECT_EQ(runner_->Decode(twice, two).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->length(), 0);
  // Still usable: the golden prompt's logits as from a fresh sequence.
  auto logits = runner_->Prefill(*seq, golden_.token_ids, /*all_logits=*/true);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const auto [diff, range] = MaxDiff(*logits, golden_.logits);
  EXPECT_LE(diff, kRelativeTolerance * range);
}

// The device's int8 cache rows are core/kvpage's int8 codec sections, bit for bit (so its pages
// ship without re-encoding), including a row too small to scale.
TEST(CudaKvCacheTest, Int8RowsAreTheKvpageCodecsBitForBit) {
  if (kernels::cuda::DeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device here; tools/device/check_cuda.sh runs these on a GPU";
  }
  namespace kc = kernels::cuda;
  constexpr int64_t kEntries = 37, kHeads = 3, kDim = 64, kCapacity = 40, kFirst = 2;
  std::mt19937 rng(7);
  std::vector<float> k(kEntries * kHeads * kDim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(i / kDim % 9) - 4);
    k[i] = std::uniform_real_distribution<float>(-magnitude, magnitude)(rng);
    v[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  }
  std::fill_n(k.begin() + 5 * kDim, kDim, 1e-32f);  // entry 1, head 2: below the codec's floor
  kc::DeviceBuffer<float> dk(k), dv(v);
  kc::DeviceBuffer<int8_t> ck(kHeads * kCapacity * kDim), cv(ck.size());
  kc::DeviceBuffer<float> sk(kHeads * kCapacity), sv(sk.size());
  const kc::KvCacheView cache{.dtype = kernels::KvDType::kI8,
                              .k = ck.data(),
                              .v = cv.data(),
                              .k_scale = sk.data(),
                              .v_scale = sv.data(),
                              .capacity = kCapacity};
  ASSERT_EQ(kc::AppendKv(cache, dk.data(), dv.data(), kEntries, kFirst, kHeads, kDim, nullptr),
            cudaSuccess);
  const std::vector<int8_t> codes[] = {ck.ToHost(), cv.ToHost()};
  const std::vector<float> scales[] = {sk.ToHost(), sv.ToHost()};
  const kvpage::CodecInfo* int8 = kvpage::FindCodecByName("int8");
  ASSERT_NE(int8, nullptr);
  for (int side = 0; side < 2; ++side) {
    const std::vector<float>& x = side == 0 ? k : v;
    for (int64_t t = 0; t < kEntries; ++t) {
      for (int64_t g = 0; g < kHeads; ++g) {
        std::vector<uint8_t> want(int8->section_bytes(kvpage::Role::kKeys, 1, kDim, 0));
        ASSERT_TRUE(
            int8->encode(kvpage::Role::kKeys, &x[(t * kHeads + g) * kDim], 1, kDim, 0, want.data())
                .ok());
        const int64_t slot = g * kCapacity + kFirst + t;
        ASSERT_EQ(std::memcmp(&scales[side][slot], want.data(), 4), 0) << side << t << g;
        ASSERT_EQ(std::memcmp(&codes[side][slot * kDim], want.data() + 4, kDim), 0)
            << side << " entry " << t << " head " << g;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaModelTest, ::testing::Values("llama3", "qwen2", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace glimpse

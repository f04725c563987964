// The Hugging Face paths of the runtime against transformers itself: tiny randomly-initialised
// checkpoints (tests/fixtures/tiny/<name>/, made by tools/oracle/make_tiny_models.py with
// transformers' own model classes and save_pretrained) load through the safetensors and
// tokenizer.json readers, and their logits, greedy tokens and token ids must match what
// transformers and `tokenizers` computed.
//
//   llama3  Llama-3 rope scaling (rope_freq_factors), untied lm_head, F32 storage
//   qwen2   q/k/v bias, tied embeddings, rope_theta 1e6, embedding rows padded past the
//           tokenizer's vocabulary, BF16 storage
//   qwen3   per-head q/k RMSNorm, head_dim 32 != hidden / heads, tied embeddings, F16 storage
//
// The weights are drawn large enough that attention is far from uniform, so a wrong RoPE band,
// bias or norm weight moves the logits by whole units (make_tiny_models.py checks this).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/generator.h"
#include "core/model/model.h"
#include "core/model/sampler.h"
#include "core/model/sequence.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden_fixtures.h"

namespace glimpse {
namespace {

using model::Model;
using model::Sequence;
using model::SequenceOptions;

// Logits must match transformers' fp32 ones to this fraction of the golden logit range.
constexpr float kRelativeTolerance = 1e-4f;

class TinyModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto golden = testing::LoadTinyModelGolden(GetParam());
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
  }

  // Loads `dir` and checks every position's logits of one prefill against the golden.
  void ExpectPrefillMatches(const std::string& dir, const std::string& label) {
    auto model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ((*model)->config().vocab_size, golden_.vocab_size);
    Sequence session(**model, pool_);
    auto logits = session.Forward(golden_.token_ids, /*all_logits=*/true);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->size(), golden_.logits.size());
    const testing::LogitsDiff d = testing::CompareLogits(*logits, golden_.logits);
    std::printf(
        "[ logits ] %s %s: max |ours − transformers| = %.3g over [%zu, %lld] "
        "(range %.2f, ratio %.2g; worst at position %lld, token %lld)\n",
        GetParam().c_str(), label.c_str(), d.max_abs, golden_.token_ids.size(),
        static_cast<long long>(golden_.vocab_size), d.range, d.max_abs / d.range,
        static_cast<long long>(d.worst / golden_.vocab_size),
        static_cast<long long>(d.worst % golden_.vocab_size));
    RecordProperty(label + "_max_abs_diff", std::to_string(d.max_abs));
    EXPECT_LE(d.max_abs, kRelativeTolerance * d.range) << GetParam() << " " << label;
  }

  testing::TinyModelGolden golden_;
  kernels::ThreadPool pool_;
};

TEST_P(TinyModelTest, PrefillLogitsMatchTransformersFp32) {
  ExpectPrefillMatches(testing::TinyModelDir(GetParam()), "prefill");
}

// Chunked prefill and one-token decode steps read K/V back from the cache; every position's
// logits must still match.
TEST_P(TinyModelTest, ChunkedAndDecodeLogitsMatchTransformersFp32) {
  auto model = Model::Load(testing::TinyModelDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  const size_t vocab = golden_.vocab_size;
  const std::vector<int32_t>& ids = golden_.token_ids;
  SequenceOptions options;
  options.prefill_chunk = 5;  // 24 tokens → chunks of 5, 5, 5, 5, 4
  Sequence chunked(**model, pool_, options);
  auto logits = chunked.Forward(std::span(ids).first(13), /*all_logits=*/true);
  ASSERT_TRUE(logits.ok()) << logits.status();
  testing::LogitsDiff d = testing::CompareLogits(*logits, golden_.logits);
  EXPECT_LE(d.max_abs, kRelativeTolerance * d.range) << "chunked prefill of 13 tokens";
  float worst = d.max_abs;
  for (size_t t = 13; t < ids.size(); ++t) {  // then decode one token at a time
    auto step = chunked.Forward(std::span(ids).subspan(t, 1));
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->size(), vocab);
    d = testing::CompareLogits(*step, golden_.logits, t * vocab);
    EXPECT_LE(d.max_abs, kRelativeTolerance * d.range) << "decode step at position " << t;
    worst = std::max(worst, d.max_abs);
  }
  std::printf("[ logits ] %s chunked+decode: max |ours − transformers| = %.3g (ratio %.2g)\n",
              GetParam().c_str(), worst, worst / d.range);
}

TEST_P(TinyModelTest, GreedyTokensMatchTransformers) {
  auto model = Model::Load(testing::TinyModelDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  // The fixture picks a prompt whose continuation has no end-of-generation token, so Generate
  // runs all steps; a clear argmax at each step makes exact equality a fair demand.
  for (int32_t t : golden_.greedy) {
    ASSERT_FALSE((*model)->tokenizer().IsEndOfGeneration(t)) << "fixture continuation has " << t;
  }
  ASSERT_GT(golden_.greedy_min_margin, 100 * kRelativeTolerance);
  Sequence session(**model, pool_);
  auto sampler = model::Sampler::Create({});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  auto result = model::Generate(session, *sampler, golden_.token_ids,
                                static_cast<int32_t>(golden_.greedy.size()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stop, model::StopReason::kMaxTokens);
  EXPECT_EQ(result->tokens, golden_.greedy);
}

TEST_P(TinyModelTest, TokenIdsMatchHfTokenizers) {
  auto model = Model::Load(testing::TinyModelDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_GE(golden_.tokenizer_cases.size(), 10u);
  for (const auto& c : golden_.tokenizer_cases) {
    EXPECT_EQ((*model)->tokenizer().Encode(c.text), c.ids) << "text: " << c.text;
    auto decoded = (*model)->tokenizer().Decode(c.ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c.text);
  }
}

// transformers >= 5 writes rope_theta and the scaling block as "rope_parameters"; 4.x (and most
// checkpoints on the Hub) wrote a top-level "rope_theta" and "rope_scaling". Both must load alike.
TEST_P(TinyModelTest, LegacyRopeConfigKeysGiveTheSameLogits) {
  namespace fs = std::filesystem;
  const fs::path src = testing::TinyModelDir(GetParam());
  const fs::path dir = fs::path(::testing::TempDir()) / ("tiny_legacy_" + GetParam());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(src)) {
    if (entry.path().filename() != "config.json")
      fs::copy(entry.path(), dir / entry.path().filename());
  }
  std::ifstream in(src / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(text.str());
  ASSERT_TRUE(config.contains("rope_parameters")) << "fixture is not in transformers 5 form";
  nlohmann::json rope = config["rope_parameters"];
  config.erase("rope_parameters");
  config["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  if (rope.value("rope_type", "default") != "default") config["rope_scaling"] = rope;
  std::ofstream(dir / "config.json") << config.dump(2);
  ExpectPrefillMatches(dir.string(), "legacy-config");
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyModelTest, ::testing::Values("llama3", "qwen2", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace glimpse

// LookaheadKV: the module loader's errors, the second pass against a joint pass over prompt +
// lookahead rows, the second pass against transformers (tests/fixtures/tiny/llama3/lookahead*,
// tools/oracle/make_lookahead_fixture.py), and the scorer through the registry and the pipeline.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/eviction/lookahead_module.h"
#include "core/eviction/lookahead_pass.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/model/model.h"
#include "core/model/safetensors.h"
#include "core/model/sequence.h"
#include "gtest/gtest.h"
#include "kernels/quant.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction {
namespace {

const std::string kDir = std::string(GLIMPSE_SOURCE_DIR) + "/tests/fixtures/tiny/llama3";
const std::string kModulePath = kDir + "/lookahead.safetensors";

using Scores = std::vector<std::vector<float>>;  // [layer][Hkv · T]

// A safetensors file to write: F32 tensors and metadata.
struct FileSpec {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  std::map<std::string, std::string> metadata;
};

// The fixture module as a FileSpec, for tests that damage one piece of it.
FileSpec ReadFixture() {
  auto file = model::SafetensorsFile::Open(kModulePath);
  EXPECT_TRUE(file.ok()) << file.status();
  FileSpec spec;
  for (const model::SafetensorsTensor& t : (*file)->tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> data(n);
    kernels::DequantizeRow(data.data(), t.data, t.type, n);
    spec.tensors[t.name] = {t.shape, std::move(data)};
  }
  for (const auto& [k, v] : (*file)->metadata()) spec.metadata[k] = v;
  return spec;
}

std::string Write(const FileSpec& spec, const std::string& name) {
  nlohmann::json header = {{"__metadata__", spec.metadata}};
  std::string data;
  for (const auto& [tensor, value] : spec.tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(value.second.data()), value.second.size() * 4);
    header[tensor] = {
        {"dtype", "F32"}, {"shape", value.first}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t size = text.size();
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << text << data;
  return path;
}

ScorerConfig Config(const std::string& method, const std::string& module_path) {
  ScorerConfig config;
  config.method = method;
  config.module_path = module_path;
  return config;
}

class LookaheadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = model::Model::Load(kDir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    std::ifstream in(kDir + "/lookahead_golden.json");
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }

  std::vector<int32_t> Prompt() const {
    return (*golden_)["token_ids"].get<std::vector<int32_t>>();
  }

  std::unique_ptr<LookaheadModule> OpenFixture() const {
    auto module = LookaheadModule::Open(kModulePath);
    EXPECT_TRUE(module.ok()) << module.status();
    return module.ok() ? *std::move(module) : nullptr;
  }

  absl::Status Adapt(const std::string& path) const {
    auto module = LookaheadModule::Open(path);
    if (!module.ok()) return module.status();
    return (*module)->AdapterFor(model_->config(), model_->fingerprint()).status();
  }

  // Prefill of the prompt, then the second pass; the cache must be as the prefill left it.
  Scores SecondPass(const LookaheadModule& module, int32_t chunk) {
    model::Sequence session(*model_, pool_, {.prefill_chunk = chunk});
    const std::vector<int32_t> prompt = Prompt();
    EXPECT_TRUE(session.Forward(prompt).ok());
    const model::KvHead before = session.cache().Read(1, 1);
    auto scores = RunLookaheadPass(session, module);
    EXPECT_TRUE(scores.ok()) << scores.status();
    EXPECT_EQ(session.next_position(), static_cast<int32_t>(prompt.size()));
    EXPECT_EQ(session.cache().TotalEntries(), int64_t{4} * static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(session.cache().Read(1, 1).keys, before.keys);
    EXPECT_EQ(session.cache().Read(1, 1).positions, before.positions);
    return scores.ok() ? *std::move(scores) : Scores{};
  }

  static model::Model* model_;
  static nlohmann::json* golden_;
  kernels::ThreadPool pool_{2};
};

model::Model* LookaheadTest::model_ = nullptr;
nlohmann::json* LookaheadTest::golden_ = nullptr;

TEST_F(LookaheadTest, OpensTheFixture) {
  auto module = OpenFixture();
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->n_lookahead(), 4);
  EXPECT_EQ(module->rank(), 2);
  EXPECT_FLOAT_EQ(module->scale(), 2.0f);
  EXPECT_EQ(module->hidden(), 64);
  auto adapter = module->AdapterFor(model_->config(), model_->fingerprint());
  EXPECT_TRUE(adapter.ok()) << adapter.status() << "\nthe tiny model's fingerprint is "
                            << model_->fingerprint();
}

TEST_F(LookaheadTest, LoaderErrors) {
  const absl::Status missing_file = Adapt(::testing::TempDir() + "/no_such_module.safetensors");
  EXPECT_EQ(missing_file.code(), absl::StatusCode::kNotFound) << missing_file;
  EXPECT_NE(missing_file.message().find("no_such_module"), std::string_view::npos);

  const std::string name = LoraTensorName(1, "mlp.down_proj", 'B');
  FileSpec spec = ReadFixture();
  spec.tensors.erase(name);
  absl::Status s = Adapt(Write(spec, "missing_tensor.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("missing tensor " + name), std::string_view::npos) << s;

  spec = ReadFixture();
  const std::string q_a = LoraTensorName(0, "self_attn.q_proj", 'A');
  spec.tensors[q_a] = {{2, 32}, std::vector<float>(64, 0.0f)};
  s = Adapt(Write(spec, "wrong_shape.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(q_a + " has shape [2, 32], expected [2, 64]"), std::string_view::npos)
      << s;

  spec = ReadFixture();
  spec.metadata["base_fingerprint"] = "0123456789abcdef0123456789abcdef";
  s = Adapt(Write(spec, "wrong_fingerprint.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("0123456789abcdef0123456789abcdef"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find(model_->fingerprint()), std::string_view::npos) << s;

  spec = ReadFixture();
  spec.metadata.erase("r");
  s = Adapt(Write(spec, "no_rank.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("\"r\""), std::string_view::npos) << s;

  spec = ReadFixture();
  spec.metadata["n_lookahead"] = "5";  // embeddings hold 4 rows
  s = Adapt(Write(spec, "wrong_n.safetensors"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("lookahead_embeddings has shape [4, 64]"), std::string_view::npos)
      << s;
}

// The second pass equals one joint forward over [prompt; lookahead] with the adapter on the
// lookahead rows only; prompt rows of the joint pass are untouched by the adapter.
TEST_F(LookaheadTest, SecondPassEqualsJointPass) {
  auto module = OpenFixture();
  ASSERT_NE(module, nullptr);
  auto adapter = module->AdapterFor(model_->config(), model_->fingerprint());
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  const std::vector<int32_t> prompt = Prompt();
  const int64_t T = static_cast<int64_t>(prompt.size()), n = module->n_lookahead();
  const int64_t D = model_->config().hidden, vocab = model_->config().vocab_size;
  std::vector<float> rows((T + n) * D);  // [T + n, D] token embeddings, then the module's rows
  model_->EmbedTokens(prompt, rows.data());
  std::copy(module->embeddings().begin(), module->embeddings().end(), rows.begin() + T * D);

  for (int32_t chunk : {256, 7, 3}) {  // one chunk; a chunk straddling T; rows split
    SCOPED_TRACE(chunk);
    model::Sequence joint(*model_, pool_, {.prefill_chunk = chunk});
    LookaheadAttentionObserver observer(joint, T, n);
    auto logits = joint.ForwardEmbeddings(
        rows, {.lora = &*adapter, .lora_first_row = T, .all_logits = true, .observer = &observer});
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_EQ(joint.next_position(), T + n);
    model::Sequence plain(*model_, pool_);
    auto plain_logits = plain.Forward(prompt, /*all_logits=*/true);
    ASSERT_TRUE(plain_logits.ok());
    for (int64_t i = 0; i < T * vocab; ++i) {
      ASSERT_NEAR((*logits)[i], (*plain_logits)[i], 1e-4) << "prompt logit " << i;
    }
    const Scores second = SecondPass(*module, chunk);
    ASSERT_EQ(second.size(), observer.scores().size());
    for (size_t l = 0; l < second.size(); ++l) {
      ASSERT_EQ(second[l].size(), observer.scores()[l].size());
      for (size_t j = 0; j < second[l].size(); ++j) {
        EXPECT_NEAR(second[l][j], observer.scores()[l][j], 1e-5) << "layer " << l << " entry " << j;
      }
    }
  }
}

// Session::ForwardEmbeddings rejects bad sizes and adapters and leaves the session unchanged.
TEST_F(LookaheadTest, ForwardEmbeddingsValidates) {
  model::Sequence session(*model_, pool_);
  ASSERT_TRUE(session.Forward(Prompt()).ok());
  const int64_t entries = session.cache().TotalEntries();
  const int32_t position = session.next_position();
  const std::vector<float> ragged(65, 0.0f);  // not a multiple of D = 64
  EXPECT_EQ(session.ForwardEmbeddings(ragged).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session.ForwardEmbeddings({}).status().code(), absl::StatusCode::kInvalidArgument);
  auto module = OpenFixture();
  ASSERT_NE(module, nullptr);
  auto adapter = module->AdapterFor(model_->config(), model_->fingerprint());
  ASSERT_TRUE(adapter.ok());
  model::LoraAdapter short_adapter = *adapter;
  short_adapter.layers.pop_back();
  auto s = session.ForwardEmbeddings(module->embeddings(), {.lora = &short_adapter});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  model::LoraAdapter skewed = *adapter;
  std::swap(skewed.layers[1].q, skewed.layers[1].k);  // k's B has Hkv·hd rows, q needs H·hd
  s = session.ForwardEmbeddings(module->embeddings(), {.lora = &skewed});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find("layer 1 q"), std::string_view::npos) << s.status();
  EXPECT_EQ(session.cache().TotalEntries(), entries);
  EXPECT_EQ(session.next_position(), position);
  // Kept entries advance the session like tokens do.
  ASSERT_TRUE(session.ForwardEmbeddings(module->embeddings()).ok());
  EXPECT_EQ(session.next_position(), position + module->n_lookahead());
}

// Against transformers' joint forward with hand-applied LoRA (make_lookahead_fixture.py).
TEST_F(LookaheadTest, MatchesTransformers) {
  auto module = OpenFixture();
  ASSERT_NE(module, nullptr);
  const Scores ours = SecondPass(*module, 256);
  const auto& golden = (*golden_)["scores"];
  ASSERT_EQ(ours.size(), golden.size());
  const int64_t T = static_cast<int64_t>(Prompt().size());
  double worst = 0.0;
  for (size_t l = 0; l < ours.size(); ++l) {
    for (int64_t h = 0; h < model_->config().n_kv_heads; ++h) {
      float sum = 0.0f;
      for (int64_t j = 0; j < T; ++j) {
        const double want = golden[l][h][j].get<double>(), got = ours[l][h * T + j];
        sum += static_cast<float>(got);
        worst = std::max(worst, std::abs(got - want) / std::max(std::abs(want), 1e-3));
        EXPECT_NEAR(got, want, 1e-4 * std::abs(want) + 1e-7)
            << "layer " << l << " kv-head " << h << " key " << j;
      }
      EXPECT_LT(sum, 1.0f + 1e-5f);  // probabilities of prompt keys, not renormalised
    }
  }
  std::printf("lookahead scores vs transformers: max relative difference %.3g\n", worst);
}

TEST_F(LookaheadTest, RegistryAndPipeline) {
  auto no_module = CreateScorer(Config("lookahead", ""));
  EXPECT_EQ(no_module.status().code(), absl::StatusCode::kInvalidArgument);
  auto stray = CreateScorer(Config("snapkv", kModulePath));
  EXPECT_EQ(stray.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = CreateScorer(Config("lookahead", kDir + "/none.safetensors"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  auto scorer = CreateScorer(Config("lookahead", kModulePath));
  ASSERT_TRUE(scorer.ok()) << scorer.status();
  EXPECT_EQ((*scorer)->needs(), kLookaheadAttention);
  const std::vector<int32_t> prompt = Prompt();
  const int64_t T = static_cast<int64_t>(prompt.size());
  model::Sequence session(*model_, pool_);
  auto result =
      PrefillAndEvict(session, prompt, **scorer, {.budget_tokens = 12, .sinks = 2, .window = 4});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(session.next_position(), T);
  EXPECT_EQ(session.cache().TotalEntries(), 12 * 4);
  // Kept = sinks + window + the top-6 lookahead scores in between, per head.
  const Scores scores = SecondPass(*(*scorer)->lookahead_module(), 256);
  // The 2 sinks, the last 4 and the top 6 of `row` between them, sorted.
  const auto kept = [T](const float* row) {
    std::vector<int32_t> middle(T - 6);
    for (int64_t j = 0; j < T - 6; ++j) middle[j] = static_cast<int32_t>(j + 2);
    std::stable_sort(middle.begin(), middle.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    std::vector<int32_t> want = {0, 1};
    want.insert(want.end(), middle.begin(), middle.begin() + 6);
    for (int64_t j = T - 4; j < T; ++j) want.push_back(static_cast<int32_t>(j));
    std::sort(want.begin(), want.end());
    return want;
  };
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t h = 0; h < 2; ++h) {
      EXPECT_EQ(result->kept_positions[l][h], kept(scores[l].data() + h * T))
          << "layer " << l << " kv-head " << h;
    }
  }

  // Pooled (pooled_scorer.cc, k 3 avg): the same pass, each kept middle entry now the top-6 of
  // (s[j-1] + s[j] + s[j+1]) / 3, zero beyond the row's ends.
  ScorerConfig pooled_config = Config("lookahead", kModulePath);
  pooled_config.kernel = 3;
  pooled_config.pooling = "avg";
  auto pooled = CreateScorer(pooled_config);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ((*pooled)->needs(), kLookaheadAttention);
  ASSERT_NE((*pooled)->lookahead_module(), nullptr);  // the pipeline runs its pass from it
  model::Sequence pooled_session(*model_, pool_);
  auto pooled_result = PrefillAndEvict(pooled_session, prompt, **pooled,
                                       {.budget_tokens = 12, .sinks = 2, .window = 4});
  ASSERT_TRUE(pooled_result.ok()) << pooled_result.status();
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t h = 0; h < 2; ++h) {
      const float* row = scores[l].data() + h * T;
      std::vector<float> avg(T);
      for (int64_t j = 0; j < T; ++j) {
        const float left = j > 0 ? row[j - 1] : 0.0f, right = j + 1 < T ? row[j + 1] : 0.0f;
        avg[j] = (left + row[j] + right) / 3.0f;
      }
      EXPECT_EQ(pooled_result->kept_positions[l][h], kept(avg.data()))
          << "layer " << l << " kv-head " << h;
    }
  }

  // With an observation window the pipeline hands the scorer its window queries too; the window
  // replaces the recent window, so the last W entries stay.
  ScorerConfig windowed_config = Config("lookahead", kModulePath);
  windowed_config.window = 3;
  auto windowed = CreateScorer(windowed_config);
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ((*windowed)->needs(), kLookaheadAttention | kKeys | kWindowQueries);
  EXPECT_EQ((*windowed)->window(), 3);
  model::Sequence windowed_session(*model_, pool_);
  auto windowed_result = PrefillAndEvict(windowed_session, prompt, **windowed,
                                         {.budget_tokens = 12, .sinks = 2, .window = 3});
  ASSERT_TRUE(windowed_result.ok()) << windowed_result.status();
  EXPECT_EQ(windowed_session.cache().TotalEntries(), 12 * 4);
  for (const auto& layer : windowed_result->kept_positions) {
    for (const std::vector<int32_t>& head : layer) {
      ASSERT_EQ(head.size(), 12u);
      EXPECT_EQ(std::vector<int32_t>(head.end() - 3, head.end()),
                (std::vector<int32_t>{static_cast<int32_t>(T - 3), static_cast<int32_t>(T - 2),
                                      static_cast<int32_t>(T - 1)}));
    }
  }
  windowed_config.window = -1;
  EXPECT_EQ(CreateScorer(windowed_config).status().code(), absl::StatusCode::kInvalidArgument);

  // A module made for another model fails before the prefill and leaves the session empty.
  FileSpec spec = ReadFixture();
  spec.metadata["base_fingerprint"] = "ffffffffffffffffffffffffffffffff";
  auto other = CreateScorer(Config("lookahead", Write(spec, "other_model.safetensors")));
  ASSERT_TRUE(other.ok()) << other.status();
  model::Sequence fresh(*model_, pool_);
  auto refused = PrefillAndEvict(fresh, prompt, **other, {.budget_tokens = 12});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fresh.next_position(), 0);
}

// The window's scores against a dense reference: (R · rows + W · window) / (R + W), where window is
// the mean over the W last prompt queries and the group's heads of their causal softmax.
TEST(LookaheadScorerTest, WindowQueriesJoinTheRows) {
  ScorerConfig config = Config("lookahead", kModulePath);
  config.window = 3;
  auto scorer = CreateScorer(config);
  ASSERT_TRUE(scorer.ok()) << scorer.status();
  const int64_t R = (*scorer)->lookahead_module()->n_lookahead();
  constexpr int32_t H = 2, hd = 4;
  constexpr int64_t T = 6, W = 3;
  std::vector<float> keys(T * hd), queries(H * W * hd), rows(T);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = std::sin(0.7f * i + 0.3f) * 2.0f;
  for (size_t i = 0; i < queries.size(); ++i) queries[i] = std::cos(1.3f * i) * 1.5f;
  for (int64_t j = 0; j < T; ++j) rows[j] = 0.05f * static_cast<float>(j + 1);
  std::vector<int32_t> positions(T);
  for (int64_t j = 0; j < T; ++j) positions[j] = static_cast<int32_t>(j);
  const std::vector<float> inv_freq = {1.0f, 0.01f};
  const LayerView view{.n_layers = 1,
                       .n_heads = H,
                       .n_kv_heads = 1,
                       .head_dim = hd,
                       .hidden = 8,
                       .n_tokens = T,
                       .positions = positions.data(),
                       .keys = keys.data(),
                       .window = W,
                       .window_queries = queries.data(),
                       .lookahead_attention = rows.data(),
                       .rope_inv_freq = inv_freq.data()};
  std::vector<float> scores(T);
  ASSERT_TRUE((*scorer)->Score(view, scores.data()).ok());
  std::vector<double> window(T, 0.0);
  for (int32_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < W; ++i) {
      const int64_t t = T - W + i;
      std::vector<double> logit(t + 1);
      double mx = -1e300, sum = 0.0;
      for (int64_t j = 0; j <= t; ++j) {
        logit[j] = 0.0;
        for (int c = 0; c < hd; ++c) logit[j] += queries[(h * W + i) * hd + c] * keys[j * hd + c];
        logit[j] /= 2.0;  // √hd
        mx = std::max(mx, logit[j]);
      }
      for (int64_t j = 0; j <= t; ++j) sum += logit[j] = std::exp(logit[j] - mx);
      for (int64_t j = 0; j <= t; ++j) window[j] += logit[j] / sum / (W * H);
    }
  }
  for (int64_t j = 0; j < T; ++j) {
    EXPECT_NEAR(scores[j], (R * rows[j] + W * window[j]) / (R + W), 1e-6) << "j=" << j;
  }
  // Without the window queries it is an error, not the rows alone.
  LayerView bare = view;
  bare.window_queries = nullptr;
  EXPECT_EQ((*scorer)->Score(bare, scores.data()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glimpse::eviction

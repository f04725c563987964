#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "core/model/gguf.h"
#include "core/model/safetensors.h"
#include "core/model/test_files.h"
#include "core/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

using kernels::DType;
using kernels::RopeStyle;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::TinyModel;

// Writes the builder's image to a fresh file and returns its path.
std::string WriteGguf(const testing::GgufBuilder& b) {
  const std::string path = testing::MakeTempDir("weights_test") + "/model.gguf";
  testing::WriteFile(path, b.Build().bytes);
  return path;
}

// A Hugging Face checkpoint directory: config.json + model.safetensors.
std::string WriteHfDir(const TinyModel& m, const std::string& extra_config = "") {
  const std::string dir = testing::MakeTempDir("weights_hf");
  testing::WriteFile(dir + "/config.json", testing::TinyModelConfigJson(m, extra_config));
  testing::WriteFile(dir + "/model.safetensors", testing::TinyModelSafetensors(m).Build());
  return dir;
}

void ExpectView(const kernels::WeightView& v, DType type, int64_t rows, int64_t cols) {
  EXPECT_NE(v.data, nullptr);
  EXPECT_EQ(v.type, type);
  EXPECT_EQ(v.rows, rows);
  EXPECT_EQ(v.cols, cols);
}

TEST(GgufWeightsTest, LoadsTinyLlama) {
  TinyModel m;
  int64_t last_done = 0, last_total = 0;
  auto progress = [](int64_t done, int64_t total, void* arg) {
    auto* p = static_cast<std::pair<int64_t*, int64_t*>*>(arg);
    EXPECT_GE(done, *p->first);
    *p->first = done;
    *p->second = total;
  };
  std::pair<int64_t*, int64_t*> arg{&last_done, &last_total};
  auto source = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)), progress, &arg);
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.ffn_hidden, 96);
  EXPECT_EQ(c.vocab_size, 128);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);

  ExpectView(w.token_embd, DType::kQ8_0, 128, 64);
  EXPECT_EQ(w.output.data, w.token_embd.data);
  ASSERT_EQ(w.layers.size(), 2u);
  const LayerWeights& l1 = w.layers[1];
  ExpectView(l1.wq, DType::kQ4_1, 64, 64);
  ExpectView(l1.wk, DType::kQ4_1, 32, 64);
  ExpectView(l1.wv, DType::kQ4_1, 32, 64);
  ExpectView(l1.wo, DType::kQ4_1, 64, 64);
  ExpectView(l1.w_gate, DType::kQ4_1, 96, 64);
  ExpectView(l1.w_up, DType::kQ4_1, 96, 64);
  ExpectView(l1.w_down, DType::kQ4_1, 64, 96);
  EXPECT_NE(l1.attn_norm, nullptr);
  EXPECT_NE(l1.ffn_norm, nullptr);
  EXPECT_EQ(l1.bq, nullptr);
  EXPECT_EQ(l1.q_norm, nullptr);
  EXPECT_EQ(w.rope_freq_factors, nullptr);

  // Views point at the file's own bytes.
  const GgufFile* gguf = (*source)->gguf();
  ASSERT_NE(gguf, nullptr);
  EXPECT_EQ(l1.wk.data, gguf->FindTensor("blk.1.attn_k.weight")->data);
  EXPECT_EQ(static_cast<const void*>(w.output_norm), gguf->FindTensor("output_norm.weight")->data);
  EXPECT_EQ(last_total, static_cast<int64_t>(gguf->tensors().size()));
  EXPECT_EQ(last_done, last_total);
}

TEST(GgufWeightsTest, LoadsUntiedOutputAndRopeFreqs) {
  TinyModel m;
  m.tied = false;
  m.rope_freqs = true;
  auto source = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)));
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  EXPECT_FALSE(w.config.tied_embeddings);
  ExpectView(w.output, DType::kQ4_1, 128, 64);
  EXPECT_NE(w.output.data, w.token_embd.data);
  EXPECT_EQ(static_cast<const void*>(w.rope_freq_factors),
            (*source)->gguf()->FindTensor("rope_freqs.weight")->data);
}

TEST(GgufWeightsTest, LoadsQwen2WithBiasesAndHalfRope) {
  TinyModel m;
  m.arch = "qwen2";
  auto source = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)));
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  EXPECT_EQ(w.config.rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(w.config.qkv_bias);
  for (const LayerWeights& l : w.layers) {
    EXPECT_NE(l.bq, nullptr);
    EXPECT_NE(l.bk, nullptr);
    EXPECT_NE(l.bv, nullptr);
  }
}

TEST(GgufWeightsTest, LoadsQwen3WithQkNormAndWideHeads) {
  TinyModel m;
  m.arch = "qwen3";
  m.head_dim = 32;  // H·hd = 128 ≠ D = 64, as in real Qwen3 models
  m.norm_type = DType::kF16;
  auto source = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)));
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  EXPECT_EQ(w.config.head_dim, 32);
  EXPECT_TRUE(w.config.qk_norm);
  EXPECT_EQ(w.config.rope_style, RopeStyle::kHalf);
  ExpectView(w.layers[0].wq, DType::kQ4_1, 128, 64);
  ExpectView(w.layers[0].wo, DType::kQ4_1, 64, 128);
  ASSERT_NE(w.layers[0].q_norm, nullptr);
  ASSERT_NE(w.layers[0].k_norm, nullptr);
  // F16 norm vectors become fp32 copies with the same values.
  const GgufTensor* raw = (*source)->gguf()->FindTensor("blk.0.attn_q_norm.weight");
  const auto* half = static_cast<const uint16_t*>(raw->data);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w.layers[0].q_norm[i], kernels::Fp16ToFp32(half[i]));
}

TEST(GgufWeightsTest, MissingTensorIsNamed) {
  for (const char* name : {"blk.1.ffn_up.weight", "token_embd.weight", "output_norm.weight"}) {
    testing::GgufBuilder b = testing::TinyModelGguf(TinyModel{});
    b.RemoveTensor(name);
    absl::Status s = LoadGgufWeights(WriteGguf(b)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(std::string("missing tensor '") + name + "'"));
  }
  TinyModel qwen2;
  qwen2.arch = "qwen2";
  testing::GgufBuilder b = testing::TinyModelGguf(qwen2);
  b.RemoveTensor("blk.0.attn_v.bias");
  EXPECT_THAT(LoadGgufWeights(WriteGguf(b)).status().message(),
              HasSubstr("missing tensor 'blk.0.attn_v.bias'"));
}

TEST(GgufWeightsTest, WrongShapeNamesTensorAndShapes) {
  testing::GgufBuilder b = testing::TinyModelGguf(TinyModel{});
  b.RemoveTensor("blk.0.attn_k.weight").AddTensor("blk.0.attn_k.weight", DType::kQ4_1, {64, 48});
  absl::Status s = LoadGgufWeights(WriteGguf(b)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'blk.0.attn_k.weight' has shape [48, 64], expected [32, 64]"));

  testing::GgufBuilder v = testing::TinyModelGguf(TinyModel{});
  v.RemoveTensor("output_norm.weight").AddTensor("output_norm.weight", DType::kF32, {64, 1});
  EXPECT_THAT(LoadGgufWeights(WriteGguf(v)).status().message(),
              HasSubstr("'output_norm.weight' has shape [1, 64], expected [64]"));
}

TEST(GgufWeightsTest, RejectsBadMetadata) {
  auto load_with = [](auto tweak) {
    testing::GgufBuilder b = testing::TinyModelGguf(TinyModel{});
    tweak(b);
    return LoadGgufWeights(WriteGguf(b)).status();
  };
  // A later duplicate key would be rejected by the parser, so tweaks use fresh builders.
  auto arch = [](const std::string& a) {
    testing::GgufBuilder b;
    b.SetString("general.architecture", a);
    return LoadGgufWeights(WriteGguf(b)).status();
  };
  EXPECT_THAT(arch("gpt2").message(), HasSubstr("unsupported architecture 'gpt2'"));
  EXPECT_THAT(arch("llama").message(), HasSubstr("'llama.block_count' not found"));
  EXPECT_THAT(load_with([](auto& b) { b.SetString("llama.rope.scaling.type", "yarn"); }).message(),
              HasSubstr("unsupported RoPE scaling 'yarn'"));

  TinyModel odd;
  odd.kv_heads = 3;
  EXPECT_THAT(LoadGgufWeights(WriteGguf(testing::TinyModelGguf(odd))).status().message(),
              HasSubstr("n_heads = 4 is not a multiple of n_kv_heads = 3"));
  EXPECT_EQ(LoadGgufWeights("/nonexistent/model.gguf").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(GgufWeightsTest, HostileBlockCountFailsFast) {
  testing::GgufBuilder b;
  b.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 2000000000)
      .SetU32("llama.context_length", 256)
      .SetU32("llama.embedding_length", 64)
      .SetU32("llama.feed_forward_length", 96)
      .SetU32("llama.attention.head_count", 4)
      .SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .AddTensor("token_embd.weight", DType::kF32, {64, 8});
  EXPECT_THAT(LoadGgufWeights(WriteGguf(b)).status().message(),
              HasSubstr("block_count 2000000000 needs at least"));
}

TEST(GgufWeightsTest, FingerprintIsStableAndSensitive) {
  const TinyModel m;
  auto a = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)));
  auto b = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(m)));
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string fp = (*a)->fingerprint();
  EXPECT_THAT(fp, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(fp, (*a)->fingerprint());
  EXPECT_EQ(fp, (*b)->fingerprint());

  // One weight byte differs.
  testing::GgufImage img = testing::TinyModelGguf(m).Build();
  img.bytes[img.bytes.size() - 1] ^= 1;
  const std::string path = testing::MakeTempDir("weights_fp") + "/model.gguf";
  testing::WriteFile(path, img.bytes);
  auto c = LoadGgufWeights(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE((*c)->fingerprint(), fp);

  // A hyper-parameter differs (untied output adds a tensor too).
  TinyModel untied = m;
  untied.tied = false;
  auto d = LoadGgufWeights(WriteGguf(testing::TinyModelGguf(untied)));
  ASSERT_TRUE(d.ok());
  EXPECT_NE((*d)->fingerprint(), fp);
}

// ---- Hugging Face safetensors ----

TEST(SafetensorsWeightsTest, LoadsTinyCheckpoint) {
  TinyModel m;
  m.embd_type = DType::kBF16;
  m.matrix_type = DType::kF16;
  m.norm_type = DType::kBF16;
  auto source = LoadSafetensorsWeights(WriteHfDir(m));
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  EXPECT_EQ(w.config.architecture, "llama");
  EXPECT_EQ(w.config.rope_style, RopeStyle::kHalf);
  EXPECT_EQ(w.config.vocab_size, 128);
  EXPECT_EQ(w.config.n_kv_heads, 2);
  EXPECT_TRUE(w.config.tied_embeddings);
  ExpectView(w.token_embd, DType::kBF16, 128, 64);
  ExpectView(w.layers[1].w_down, DType::kF16, 64, 96);
  EXPECT_EQ((*source)->gguf(), nullptr);
  EXPECT_EQ(w.rope_freq_factors, nullptr);
  // BF16 norms are converted to fp32: values come from RandomTensorBytes in [-1, 1].
  for (int i = 0; i < 64; ++i) {
    EXPECT_LE(std::abs(w.layers[0].attn_norm[i]), 1.0f);
  }
  EXPECT_THAT((*source)->fingerprint(), MatchesRegex("[0-9a-f]{32}"));
}

TEST(SafetensorsWeightsTest, LoadsQwen2UntiedAndSharded) {
  TinyModel m;
  m.arch = "qwen2";
  m.tied = false;
  m.embd_type = m.matrix_type = DType::kF32;
  const std::string dir = testing::MakeTempDir("weights_shards");
  testing::WriteFile(dir + "/config.json", testing::TinyModelConfigJson(m));
  // Split the tensors across two shards: layer 1 in the second file.
  testing::SafetensorsBuilder first, second;
  std::string weight_map;
  const std::string all = testing::TinyModelSafetensors(m).Build();
  auto parsed = SafetensorsFile::Parse(reinterpret_cast<const uint8_t*>(all.data()), all.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (const SafetensorsTensor& t : (*parsed)->tensors()) {
    const bool later = t.name.find("layers.1.") != std::string::npos;
    (later ? second : first)
        .Add(t.name, kernels::DTypeName(t.type), t.shape,
             std::string(static_cast<const char*>(t.data), t.bytes));
    weight_map += (weight_map.empty() ? "" : ",") + ("\"" + t.name + "\":\"") +
                  (later ? "b.safetensors" : "a.safetensors") + "\"";
  }
  testing::WriteFile(dir + "/a.safetensors", first.Build());
  testing::WriteFile(dir + "/b.safetensors", second.Build());
  testing::WriteFile(dir + "/model.safetensors.index.json",
                     "{\"metadata\":{},\"weight_map\":{" + weight_map + "}}");
  auto source = LoadSafetensorsWeights(dir);
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelWeights& w = (*source)->weights();
  EXPECT_TRUE(w.config.qkv_bias);
  EXPECT_FALSE(w.config.tied_embeddings);
  EXPECT_NE(w.output.data, w.token_embd.data);
  EXPECT_NE(w.layers[1].bv, nullptr);
}

TEST(SafetensorsWeightsTest, ComputesLlama3RopeFactors) {
  TinyModel m;
  m.embd_type = m.matrix_type = DType::kF32;
  m.rope_theta = 500000.0f;
  const std::string scaling =
      R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,)"
      R"("high_freq_factor":4.0,"original_max_position_embeddings":8192})";
  auto source = LoadSafetensorsWeights(WriteHfDir(m, scaling));
  ASSERT_TRUE(source.ok()) << source.status();
  const float* f = (*source)->weights().rope_freq_factors;
  ASSERT_NE(f, nullptr);
  // Reference: transformers' _compute_llama3_parameters with head_dim 16, θ = 500000.
  const float expected[8] = {1, 1, 1, 1, 2.6945296878947333f, 8, 8, 8};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(f[i], expected[i], 1e-5f) << i;

  const std::string yarn = R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})";
  EXPECT_THAT(LoadSafetensorsWeights(WriteHfDir(m, yarn)).status().message(),
              HasSubstr("unsupported rope_scaling type 'yarn'"));
}

TEST(SafetensorsWeightsTest, ErrorsNameHuggingFaceTensors) {
  TinyModel m;
  m.embd_type = m.matrix_type = DType::kF32;
  const std::string dir = WriteHfDir(m);
  testing::SafetensorsBuilder b = testing::TinyModelSafetensors(m);
  testing::SafetensorsBuilder partial;
  const std::string all = b.Build();
  auto parsed = SafetensorsFile::Parse(reinterpret_cast<const uint8_t*>(all.data()), all.size());
  ASSERT_TRUE(parsed.ok());
  for (const SafetensorsTensor& t : (*parsed)->tensors()) {
    if (t.name == "model.layers.1.mlp.up_proj.weight") continue;
    partial.Add(t.name, kernels::DTypeName(t.type), t.shape,
                std::string(static_cast<const char*>(t.data), t.bytes));
  }
  testing::WriteFile(dir + "/model.safetensors", partial.Build());
  EXPECT_THAT(LoadSafetensorsWeights(dir).status().message(),
              HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));

  EXPECT_EQ(LoadSafetensorsWeights(testing::MakeTempDir("weights_empty")).status().code(),
            absl::StatusCode::kNotFound);
  // An untied config needs lm_head.weight.
  TinyModel untied = m;
  untied.tied = false;
  const std::string untied_dir = WriteHfDir(untied);
  testing::WriteFile(untied_dir + "/model.safetensors", testing::TinyModelSafetensors(m).Build());
  EXPECT_THAT(LoadSafetensorsWeights(untied_dir).status().message(),
              HasSubstr("missing tensor 'lm_head.weight'"));

  TinyModel gpt = m;
  gpt.arch = "gpt2";
  EXPECT_THAT(LoadSafetensorsWeights(WriteHfDir(gpt)).status().message(),
              HasSubstr("model_type 'gpt2' is not supported"));
}

// ---- the real default model ----

std::string DefaultModelPath() {
  if (const char* p = std::getenv("GLIMPSE_MODEL_PATH"); p != nullptr && *p != '\0') return p;
  std::string cache;
  if (const char* c = std::getenv("GLIMPSE_CACHE_DIR"); c != nullptr && *c != '\0') {
    cache = c;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    cache = std::string(home) + "/.cache/glimpse";
  }
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(RealModelTest, LoadsSmolLM2) {
  const std::string path = DefaultModelPath();
  auto source = LoadGgufWeights(path);
  ASSERT_TRUE(source.ok()) << source.status()
                           << "\nThe default model is missing or unreadable; run `make model` "
                              "(or set GLIMPSE_MODEL_PATH).";
  const ModelWeights& w = (*source)->weights();
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_hidden, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(w.token_embd.type, DType::kQ8_0);
  EXPECT_EQ(w.output.data, w.token_embd.data);
  ASSERT_EQ(w.layers.size(), 30u);
  std::set<DType> matrix_types;
  for (const LayerWeights& l : w.layers) {
    for (const kernels::WeightView* v :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      matrix_types.insert(v->type);
    }
  }
  EXPECT_EQ(matrix_types, (std::set<DType>{DType::kQ4_1}));
  ExpectView(w.layers[29].wk, DType::kQ4_1, 192, 576);
  ExpectView(w.layers[0].w_down, DType::kQ4_1, 576, 1536);
  EXPECT_EQ((*source)->gguf()->FindTensor("blk.0.attn_norm.weight")->type, DType::kF32);
  const std::string fp = (*source)->fingerprint();
  EXPECT_THAT(fp, MatchesRegex("[0-9a-f]{32}"));
  auto again = LoadGgufWeights(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), fp);
}

}  // namespace
}  // namespace glimpse::model

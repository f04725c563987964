#include "core/model/test_files.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace glimpse::model::testing {
namespace {

// GGUF value type ids (ggml/docs/gguf.md).
constexpr uint32_t kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

template <typename T>
std::string Encode(uint32_t type, T v) {
  std::string out;
  Put(out, type);
  Put(out, v);
  return out;
}

template <typename T>
std::string EncodeArray(uint32_t elem_type, const std::vector<T>& values) {
  std::string out;
  Put(out, kArray);
  Put(out, elem_type);
  Put<uint64_t>(out, values.size());
  for (const T& v : values) Put(out, v);
  return out;
}

int64_t Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

// ---- GGUF ----

GgufBuilder::GgufBuilder(uint32_t version, uint32_t alignment)
    : version_(version), alignment_(alignment) {
  if (alignment != 32) SetU32("general.alignment", alignment);
}

GgufBuilder& GgufBuilder::SetString(const std::string& key, const std::string& value) {
  std::string v;
  Put(v, kString);
  PutString(v, value);
  kv_.emplace_back(key, v);
  return *this;
}
GgufBuilder& GgufBuilder::SetU32(const std::string& key, uint32_t value) {
  kv_.emplace_back(key, Encode(kU32, value));
  return *this;
}
GgufBuilder& GgufBuilder::SetI32(const std::string& key, int32_t value) {
  kv_.emplace_back(key, Encode(kI32, value));
  return *this;
}
GgufBuilder& GgufBuilder::SetU64(const std::string& key, uint64_t value) {
  kv_.emplace_back(key, Encode(kU64, value));
  return *this;
}
GgufBuilder& GgufBuilder::SetF32(const std::string& key, float value) {
  kv_.emplace_back(key, Encode(kF32, value));
  return *this;
}
GgufBuilder& GgufBuilder::SetBool(const std::string& key, bool value) {
  kv_.emplace_back(key, Encode(kBool, static_cast<uint8_t>(value)));
  return *this;
}
GgufBuilder& GgufBuilder::SetStringArray(const std::string& key,
                                         const std::vector<std::string>& values) {
  std::string v;
  Put(v, kArray);
  Put(v, kString);
  Put<uint64_t>(v, values.size());
  for (const std::string& s : values) PutString(v, s);
  kv_.emplace_back(key, v);
  return *this;
}
GgufBuilder& GgufBuilder::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  kv_.emplace_back(key, EncodeArray(kI32, values));
  return *this;
}
GgufBuilder& GgufBuilder::SetF32Array(const std::string& key, const std::vector<float>& values) {
  kv_.emplace_back(key, EncodeArray(kF32, values));
  return *this;
}
GgufBuilder& GgufBuilder::SetRaw(const std::string& key, uint32_t type,
                                 const std::string& value_bytes) {
  std::string v;
  Put(v, type);
  kv_.emplace_back(key, v + value_bytes);
  return *this;
}

GgufBuilder& GgufBuilder::AddTensor(const std::string& name, uint32_t type,
                                    const std::vector<int64_t>& dims, const std::string& data) {
  tensors_.push_back(Tensor{name, type, dims, data});
  return *this;
}

GgufBuilder& GgufBuilder::AddTensor(const std::string& name, kernels::DType type,
                                    const std::vector<int64_t>& dims, uint32_t seed) {
  return AddTensor(name, static_cast<uint32_t>(type), dims, RandomTensorBytes(type, dims, seed));
}

GgufBuilder& GgufBuilder::RemoveTensor(const std::string& name) {
  std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
  return *this;
}

GgufImage GgufBuilder::Build() const {
  GgufImage img;
  std::string& out = img.bytes;
  out += "GGUF";
  Put(out, version_);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, kv_.size());
  img.metadata_start = out.size();
  for (const auto& [key, value] : kv_) {
    PutString(out, key);
    out += value;
  }
  auto align = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    img.tensor_info_offsets.push_back(out.size());
    PutString(out, t.name);
    Put<uint32_t>(out, t.dims.size());
    for (int64_t d : t.dims) Put<uint64_t>(out, d);
    Put(out, t.type);
    Put(out, offset);
    offset = align(offset + t.data.size());
  }
  out.resize(align(out.size()), '\0');
  img.data_start = out.size();
  // Padding goes between tensors only, so the image ends with the last tensor's last byte and
  // truncating it anywhere loses data.
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > 0) out.resize(img.data_start + align(out.size() - img.data_start), '\0');
    out += tensors_[i].data;
  }
  return img;
}

std::string RandomTensorBytes(kernels::DType type, const std::vector<int64_t>& dims,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const int64_t n = Elements(dims);
  std::string out;
  switch (type) {
    case kernels::DType::kF32:
      for (int64_t i = 0; i < n; ++i) Put(out, unit(rng));
      return out;
    case kernels::DType::kF16:
      for (int64_t i = 0; i < n; ++i) Put(out, kernels::Fp32ToFp16(unit(rng)));
      return out;
    case kernels::DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        float f = unit(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        Put<uint16_t>(out, bits >> 16);
      }
      return out;
    default:
      break;
  }
  const int64_t block_bytes = kernels::BlockBytes(type);
  if (kernels::BlockElems(type) == 256) {
    // K-quants: random quants and sub-block scales, then small finite fp16 super-block scales
    // (d and dmin first in Q4_K / Q5_K; Q6_K's d is its last two bytes).
    for (int64_t b = 0; b < n / kernels::BlockElems(type); ++b) {
      std::string block;
      for (int64_t i = 0; i < block_bytes; ++i) block.push_back(static_cast<char>(rng()));
      const uint16_t d = kernels::Fp32ToFp16(0.001f * (1 + rng() % 8));
      const uint16_t dmin = kernels::Fp32ToFp16(0.01f);
      if (type == kernels::DType::kQ6_K) {
        std::memcpy(block.data() + block_bytes - 2, &d, 2);
      } else {
        std::memcpy(block.data(), &d, 2);
        std::memcpy(block.data() + 2, &dmin, 2);
      }
      out += block;
    }
    return out;
  }
  // Block formats: a small finite fp16 scale (and min for Q4_1), then random quants.
  const int64_t header = type == kernels::DType::kQ4_1 ? 4 : 2;
  for (int64_t b = 0; b < n / kernels::BlockElems(type); ++b) {
    Put(out, kernels::Fp32ToFp16(0.01f * (1 + rng() % 8)));
    if (header == 4) Put(out, kernels::Fp32ToFp16(-0.05f));
    for (int64_t i = header; i < block_bytes; ++i) out.push_back(static_cast<char>(rng()));
  }
  return out;
}

// ---- safetensors ----

SafetensorsBuilder& SafetensorsBuilder::Add(const std::string& name, const std::string& dtype,
                                            const std::vector<int64_t>& shape,
                                            const std::string& data) {
  tensors_.push_back(Tensor{name, dtype, shape, data});
  return *this;
}

SafetensorsBuilder& SafetensorsBuilder::Add(const std::string& name, kernels::DType type,
                                            const std::vector<int64_t>& shape, uint32_t seed) {
  // RandomTensorBytes only looks at the element count, so the order of `shape` does not matter.
  return Add(name, kernels::DTypeName(type), shape, RandomTensorBytes(type, shape, seed));
}

SafetensorsBuilder& SafetensorsBuilder::SetMetadata(const std::string& key,
                                                    const std::string& value) {
  metadata_.emplace_back(key, value);
  return *this;
}

SafetensorsBuilder& SafetensorsBuilder::SetRawHeader(const std::string& json) {
  raw_header_ = json;
  return *this;
}

std::string SafetensorsBuilder::Build() const {
  std::string header = raw_header_;
  std::string data;
  if (header.empty()) {
    std::vector<std::string> entries;
    if (!metadata_.empty()) {
      std::vector<std::string> kv;
      for (const auto& [k, v] : metadata_) kv.push_back(absl::StrCat("\"", k, "\":\"", v, "\""));
      entries.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(kv, ","), "}"));
    }
    for (const Tensor& t : tensors_) {
      entries.push_back(absl::StrCat("\"", t.name, "\":{\"dtype\":\"", t.dtype, "\",\"shape\":[",
                                     absl::StrJoin(t.shape, ","), "],\"data_offsets\":[",
                                     data.size(), ",", data.size() + t.data.size(), "]}"));
      data += t.data;
    }
    header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  } else {
    for (const Tensor& t : tensors_) data += t.data;
  }
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string out;
  Put<uint64_t>(out, header.size());
  return out + header + data;
}

// ---- tiny model ----

namespace {

using kernels::DType;

// Every tensor of the tiny model: GGUF name, Hugging Face name, shape outermost first, is_matrix.
struct TinyTensor {
  std::string gguf, hf;
  std::vector<int64_t> shape;
  DType type;
};

std::vector<TinyTensor> TinyTensors(const TinyModel& m) {
  const int64_t d = m.hidden, q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  const int64_t f = m.ffn, v = m.vocab;
  std::vector<TinyTensor> out = {
      {"token_embd.weight", "model.embed_tokens.weight", {v, d}, m.embd_type},
      {"output_norm.weight", "model.norm.weight", {d}, m.norm_type}};
  if (!m.tied) out.push_back({"output.weight", "lm_head.weight", {v, d}, m.matrix_type});
  for (int i = 0; i < m.layers; ++i) {
    const std::string g = absl::StrCat("blk.", i, "."), h = absl::StrCat("model.layers.", i, ".");
    auto add = [&](const std::string& gs, const std::string& hs, std::vector<int64_t> shape,
                   DType type) {
      out.push_back({g + gs, h + hs, std::move(shape), type});
    };
    add("attn_norm.weight", "input_layernorm.weight", {d}, m.norm_type);
    add("attn_q.weight", "self_attn.q_proj.weight", {q, d}, m.matrix_type);
    add("attn_k.weight", "self_attn.k_proj.weight", {kv, d}, m.matrix_type);
    add("attn_v.weight", "self_attn.v_proj.weight", {kv, d}, m.matrix_type);
    add("attn_output.weight", "self_attn.o_proj.weight", {d, q}, m.matrix_type);
    if (m.arch == "qwen2") {
      add("attn_q.bias", "self_attn.q_proj.bias", {q}, m.norm_type);
      add("attn_k.bias", "self_attn.k_proj.bias", {kv}, m.norm_type);
      add("attn_v.bias", "self_attn.v_proj.bias", {kv}, m.norm_type);
    }
    if (m.arch == "qwen3") {
      add("attn_q_norm.weight", "self_attn.q_norm.weight", {m.head_dim}, m.norm_type);
      add("attn_k_norm.weight", "self_attn.k_norm.weight", {m.head_dim}, m.norm_type);
    }
    add("ffn_norm.weight", "post_attention_layernorm.weight", {d}, m.norm_type);
    add("ffn_gate.weight", "mlp.gate_proj.weight", {f, d}, m.matrix_type);
    add("ffn_up.weight", "mlp.up_proj.weight", {f, d}, m.matrix_type);
    add("ffn_down.weight", "mlp.down_proj.weight", {d, f}, m.matrix_type);
  }
  return out;
}

}  // namespace

GgufBuilder TinyModelGguf(const TinyModel& m) {
  GgufBuilder b;
  const std::string& a = m.arch;
  b.SetString("general.architecture", a)
      .SetString("general.name", "tiny")
      .SetU32(a + ".block_count", m.layers)
      .SetU32(a + ".context_length", 256)
      .SetU32(a + ".embedding_length", m.hidden)
      .SetU32(a + ".feed_forward_length", m.ffn)
      .SetU32(a + ".attention.head_count", m.heads)
      .SetU32(a + ".attention.head_count_kv", m.kv_heads)
      .SetF32(a + ".rope.freq_base", m.rope_theta)
      .SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (m.head_dim != m.hidden / m.heads) b.SetU32(a + ".attention.key_length", m.head_dim);
  uint32_t seed = 1;
  for (const TinyTensor& t : TinyTensors(m)) {
    b.AddTensor(t.gguf, t.type, std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()), seed++);
  }
  if (m.rope_freqs) b.AddTensor("rope_freqs.weight", DType::kF32, {m.head_dim / 2}, seed++);
  return b;
}

SafetensorsBuilder TinyModelSafetensors(const TinyModel& m) {
  SafetensorsBuilder b;
  uint32_t seed = 1;
  for (const TinyTensor& t : TinyTensors(m)) b.Add(t.hf, t.type, t.shape, seed++);
  return b;
}

std::string TinyModelConfigJson(const TinyModel& m, const std::string& extra_fields) {
  return absl::StrCat("{\"model_type\":\"", m.arch, "\",\"num_hidden_layers\":", m.layers,
                      ",\"hidden_size\":", m.hidden, ",\"intermediate_size\":", m.ffn,
                      ",\"num_attention_heads\":", m.heads, ",\"num_key_value_heads\":", m.kv_heads,
                      ",\"head_dim\":", m.head_dim,
                      ",\"max_position_embeddings\":256,\"rms_norm_eps\":1e-05",
                      ",\"rope_theta\":", m.rope_theta, ",\"vocab_size\":", m.vocab,
                      ",\"tie_word_embeddings\":", m.tied ? "true" : "false", extra_fields, "}");
}

// ---- files ----

std::string MakeTempDir(const std::string& prefix) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(root != nullptr ? root : "/tmp", "/", prefix, "XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
  return tmpl;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace glimpse::model::testing

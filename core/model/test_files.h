// Test helpers that build small GGUF and safetensors images in memory, and a tiny Llama-family
// model in either format, so that format and loader tests need no files from outside the repo.
//
// The builders write exactly what they are told (they do not validate), which lets tests produce
// both valid files and precisely corrupted ones. Not thread-safe; test use only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quant.h"

namespace glimpse::model::testing {

// A GGUF image plus where its parts were written, for tests that corrupt specific fields.
struct GgufImage {
  std::string bytes;
  size_t metadata_start = 0;                // first key/value record (offset 24)
  std::vector<size_t> tensor_info_offsets;  // start of each tensor's info record
  size_t data_start = 0;                    // start of the (aligned) data section
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(bytes.data()); }
  size_t size() const { return bytes.size(); }
};

// GGUF v2/v3 writer: metadata and tensors in insertion order. Tensor data is placed at increasing
// `alignment`-aligned offsets. An alignment other than 32 also writes general.alignment (u32).
class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint32_t alignment = 32);

  GgufBuilder& SetString(const std::string& key, const std::string& value);
  GgufBuilder& SetU32(const std::string& key, uint32_t value);
  GgufBuilder& SetI32(const std::string& key, int32_t value);
  GgufBuilder& SetU64(const std::string& key, uint64_t value);
  GgufBuilder& SetF32(const std::string& key, float value);
  GgufBuilder& SetBool(const std::string& key, bool value);
  GgufBuilder& SetStringArray(const std::string& key, const std::vector<std::string>& values);
  GgufBuilder& SetI32Array(const std::string& key, const std::vector<int32_t>& values);
  GgufBuilder& SetF32Array(const std::string& key, const std::vector<float>& values);
  // A key with a raw GGUF type id and pre-encoded value bytes (for hostile inputs).
  GgufBuilder& SetRaw(const std::string& key, uint32_t type, const std::string& value_bytes);

  // `dims` in GGML order (innermost first; a matrix is {cols, rows}). `type` is a raw GGML type
  // id so tests can write unsupported ones; `data` is written as given.
  GgufBuilder& AddTensor(const std::string& name, uint32_t type, const std::vector<int64_t>& dims,
                         const std::string& data);
  // As above with deterministic pseudo-random contents of the right size for a supported type.
  GgufBuilder& AddTensor(const std::string& name, kernels::DType type,
                         const std::vector<int64_t>& dims, uint32_t seed = 1);
  // Removes a tensor added earlier (no-op when absent).
  GgufBuilder& RemoveTensor(const std::string& name);

  GgufImage Build() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> dims;
    std::string data;
  };
  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, std::string>> kv_;  // key, encoded type + value
  std::vector<Tensor> tensors_;
};

// Bytes of a tensor of `type` and GGML `dims` filled deterministically from `seed`; block formats
// get finite fp16 scales and F32/F16/BF16 values in [-1, 1].
std::string RandomTensorBytes(kernels::DType type, const std::vector<int64_t>& dims, uint32_t seed);

// Safetensors writer: tensors in insertion order, data packed back to back, the JSON header
// padded with spaces to a multiple of 8 bytes (as the reference writer does).
class SafetensorsBuilder {
 public:
  // `dtype` as written in the header ("F32", "BF16", ...); `shape` outermost first.
  SafetensorsBuilder& Add(const std::string& name, const std::string& dtype,
                          const std::vector<int64_t>& shape, const std::string& data);
  SafetensorsBuilder& Add(const std::string& name, kernels::DType type,
                          const std::vector<int64_t>& shape, uint32_t seed = 1);
  SafetensorsBuilder& SetMetadata(const std::string& key, const std::string& value);
  // Replaces the JSON header verbatim (for hostile inputs); tensor data is still appended.
  SafetensorsBuilder& SetRawHeader(const std::string& json);
  std::string Build() const;

 private:
  struct Tensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::string data;
  };
  std::vector<Tensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::string raw_header_;
};

// A tiny Llama-family model. Defaults: 2 layers, D = 64, 4 heads, 2 kv heads, head_dim 16,
// F = 96, V = 128.
struct TinyModel {
  std::string arch = "llama";  // llama, qwen2, qwen3
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 16;
  int ffn = 96;
  int vocab = 128;
  float rope_theta = 10000.0f;
  kernels::DType embd_type = kernels::DType::kQ8_0;
  kernels::DType matrix_type = kernels::DType::kQ4_1;
  kernels::DType norm_type = kernels::DType::kF32;
  bool tied = true;         // omit output.weight / lm_head.weight
  bool rope_freqs = false;  // GGUF rope_freqs.weight [head_dim / 2]
};

// The tiny model as a GGUF builder (with llama.cpp metadata keys), so tests can tweak it.
GgufBuilder TinyModelGguf(const TinyModel& m);
// The tiny model's safetensors (Hugging Face names; matrix_type/norm_type must be F32/F16/BF16)
// and the matching config.json text.
SafetensorsBuilder TinyModelSafetensors(const TinyModel& m);
std::string TinyModelConfigJson(const TinyModel& m, const std::string& extra_fields = "");

// Filesystem helpers: a fresh directory under the test temp dir, and whole-file writes.
std::string MakeTempDir(const std::string& prefix);
void WriteFile(const std::string& path, const std::string& bytes);

}  // namespace glimpse::model::testing

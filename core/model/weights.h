// The model as plain structs of weight views (llm.c style): pointers into a mapped file, shapes
// in comments. A ModelWeights never owns the bytes; the WeightSource that produced it does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"
#include "kernels/matmul.h"

namespace glimpse::model {

class GgufFile;

struct LayerWeights {
  const float* attn_norm = nullptr;  // [D]
  kernels::WeightView wq;            // [H·hd, D]
  kernels::WeightView wk;            // [Hkv·hd, D]
  kernels::WeightView wv;            // [Hkv·hd, D]
  kernels::WeightView wo;            // [D, H·hd]
  const float* bq = nullptr;         // [H·hd]   Qwen2 only
  const float* bk = nullptr;         // [Hkv·hd] Qwen2 only
  const float* bv = nullptr;         // [Hkv·hd] Qwen2 only
  const float* q_norm = nullptr;     // [hd]     Qwen3 only
  const float* k_norm = nullptr;     // [hd]     Qwen3 only
  const float* ffn_norm = nullptr;   // [D]
  kernels::WeightView w_gate;        // [F, D]
  kernels::WeightView w_up;          // [F, D]
  kernels::WeightView w_down;        // [D, F]
};

struct ModelWeights {
  ModelConfig config;
  kernels::WeightView token_embd;  // [V, D]
  std::vector<LayerWeights> layers;
  const float* output_norm = nullptr;  // [D]
  kernels::WeightView output;          // [V, D]; equals token_embd when tied
  // RoPE frequency divisors [hd / 2] (Llama-3 scaling: GGUF's rope_freqs.weight, or computed from
  // config.json's rope_scaling / rope_parameters); nullptr = none. inv_freq[i] = θ^(−2i/hd) /
  // rope_freq_factors[i].
  const float* rope_freq_factors = nullptr;
};

// RoPE's θ_i per position for the model, [head_dim / 2]: θ^(−2i/hd), divided by
// rope_freq_factors[i] where the model has them (computed in double, stored fp32).
std::vector<float> RopeInverseFrequencies(const ModelWeights& w);

// Owns whatever backs a ModelWeights (file mappings, fp32 copies of norm vectors that were stored
// as F16/BF16) and the tokenizer metadata source.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const ModelWeights& weights() const = 0;
  // Stable digest of architecture hyper-parameters + the name, type, shape and bytes of every
  // tensor the model uses (the "model fingerprint" of DESIGN.md section 3): XXH3-128 as 32
  // lowercase hex digits. The first call hashes every weight byte (~10 GB/s from page cache);
  // later calls return the cached value. Thread-safe.
  virtual std::string fingerprint() const = 0;
  // The parsed GGUF file (tokenizer metadata lives there) when loaded from GGUF, else nullptr.
  // Valid for this object's lifetime.
  virtual const GgufFile* gguf() const { return nullptr; }
};

// Loads a GGUF model (llama, qwen2, qwen3 architectures). Tensors: token_embd, output_norm,
// output (optional: tied when absent), blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
// ffn_norm, ffn_gate, ffn_up, ffn_down}, plus attn_{q,k,v}.bias (qwen2) and attn_{q,k}_norm
// (qwen3). Errors name the missing or ill-shaped tensor. `on_progress(done, total)` is called as
// tensors are validated (may be null).
absl::StatusOr<std::unique_ptr<WeightSource>> LoadGgufWeights(const std::string& path,
                                                              void (*on_progress)(int64_t, int64_t,
                                                                                  void*) = nullptr,
                                                              void* progress_arg = nullptr);

// Loads a Hugging Face checkpoint directory: config.json + model.safetensors (or the shards listed
// in model.safetensors.index.json). Uses RopeStyle::kHalf (HF weights are not permuted). RoPE
// settings come from the top-level rope_theta / rope_scaling (transformers 4) or from the
// rope_parameters block (transformers 5); a Llama-3 block becomes rope_freq_factors, other scaling
// types are rejected. lm_head.weight is optional (tied) unless tie_word_embeddings is false.
absl::StatusOr<std::unique_ptr<WeightSource>> LoadSafetensorsWeights(const std::string& dir);

}  // namespace glimpse::model

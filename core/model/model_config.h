// Hyper-parameters of a Llama-family decoder (Llama 2/3.x, SmolLM2, Qwen2, Qwen3).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/ops.h"

namespace glimpse::model {

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3"
  int32_t n_layers = 0;
  int32_t hidden = 0;      // model width D
  int32_t n_heads = 0;     // query heads H
  int32_t n_kv_heads = 0;  // key/value heads Hkv (GQA groups of H / Hkv)
  int32_t head_dim = 0;    // usually D / H
  int32_t ffn_hidden = 0;  // SwiGLU inner width
  int32_t vocab_size = 0;
  int32_t context_length = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalf;
  bool tied_embeddings = false;  // output projection reuses token_embd
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm per head on q and k before RoPE
};

}  // namespace glimpse::model

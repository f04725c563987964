// A LookaheadKV module (arXiv 2603.10899): n learned lookahead embeddings plus a LoRA adapter on
// every layer's q, k, v, o, gate, up and down projections, applied only to the lookahead rows.
// LookaheadKV appends the n rows after the prompt, runs them through the model with the adapter,
// and scores each prompt key by the lookahead rows' attention to it
// (core/eviction/lookahead_pass.h).
//
// File format: one safetensors file (F32, F16 or BF16 tensors) holding
//   lookahead_embeddings                                             [n, D]
//   base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_A.weight   [r, in]
//   base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_B.weight   [out, r]
//   base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight (same)
// (PEFT's names), and __metadata__ strings "lora_alpha", "r", "n_lookahead" and
// "base_fingerprint" (the Model::fingerprint() of the model it was trained for). The LoRA scale is
// lora_alpha / r, as in PEFT.
//
// The LoRA tensors are in Hugging Face's layout, as PEFT writes them. For a model whose q/k rows
// are in GGUF's interleaved-RoPE order (RopeStyle::kInterleaved, llama GGUF files), AdapterFor()
// binds q's and k's B with their rows permuted the same way (fp32 copies made once per tensor).
//
// Open() validates what the file says about itself; AdapterFor() validates it against one model.
// Logically immutable after Open(); thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/model/model_config.h"
#include "core/model/safetensors.h"
#include "core/model/sequence.h"

namespace glimpse::eviction {

class LookaheadModule {
 public:
  // Reads and checks the metadata (lora_alpha finite and > 0, r >= 1, n_lookahead >= 1,
  // base_fingerprint non-empty) and lookahead_embeddings ([n_lookahead, D], D >= 1). A missing
  // or unreadable file is the file system's error (NotFound for a missing one) naming the path;
  // anything malformed is InvalidArgument naming the key or tensor.
  static absl::StatusOr<std::unique_ptr<LookaheadModule>> Open(const std::string& path);

  // The LoRA adapter for a model with `config` and `fingerprint`. FailedPrecondition naming both
  // fingerprints when the module was made for another model; InvalidArgument naming the tensor
  // when one is missing, or with the expected and actual shapes when one is ill-shaped (D of the
  // embeddings included). The views point into this module's mapping.
  absl::StatusOr<model::LoraAdapter> AdapterFor(const model::ModelConfig& config,
                                                std::string_view fingerprint) const;

  const std::string& path() const { return path_; }
  int64_t n_lookahead() const { return n_lookahead_; }
  int64_t hidden() const { return hidden_; }  // D
  int64_t rank() const { return rank_; }      // r
  float alpha() const { return alpha_; }
  float scale() const { return alpha_ / static_cast<float>(rank_); }
  const std::string& base_fingerprint() const { return base_fingerprint_; }
  // [n_lookahead, D] fp32, converted from the stored type.
  const std::vector<float>& embeddings() const { return embeddings_; }

 private:
  LookaheadModule() = default;
  absl::Status ReadMetadata();
  absl::Status ReadEmbeddings();
  // The [rows, cols] view of a LoRA tensor, or InvalidArgument naming it.
  absl::StatusOr<kernels::WeightView> View(const std::string& name, int64_t rows,
                                           int64_t cols) const;
  // `b` (tensor `name`) with its rows in interleaved-RoPE order, cached for the module's life.
  kernels::WeightView Interleaved(const std::string& name, const kernels::WeightView& b,
                                  int64_t head_dim) const;

  std::string path_;
  std::unique_ptr<model::SafetensorsFile> file_;
  int64_t n_lookahead_ = 0;
  int64_t hidden_ = 0;
  int64_t rank_ = 0;
  float alpha_ = 0.0f;
  std::string base_fingerprint_;
  std::vector<float> embeddings_;  // [n_lookahead, D]
  mutable absl::Mutex mu_;
  // "tensor/head_dim" -> B [rows, r] fp32 in interleaved order; entries are never removed, so
  // views into them live as long as the module.
  mutable std::map<std::string, std::vector<float>> interleaved_ ABSL_GUARDED_BY(mu_);
};

// PEFT's name of one LoRA tensor: LoraTensorName(3, "self_attn.q_proj", 'A') =
// "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight".
std::string LoraTensorName(int32_t layer, std::string_view module, char which);

}  // namespace glimpse::eviction

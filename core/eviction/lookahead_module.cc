// LookaheadModule: the safetensors reader does the byte-level validation (header, dtypes, extents);
// this file checks the module's own contract (metadata, tensor names and shapes) and binds the
// LoRA tensors as WeightViews in their stored type, so the forward pass reads them like weights.
#include "core/eviction/lookahead_module.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/common/status_macros.h"
#include "kernels/quant.h"

namespace glimpse::eviction {
namespace {

constexpr char kEmbeddings[] = "lookahead_embeddings";

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// One adapted projection: its PEFT module name, the LoraLayer slot and the base weight's shape.
struct Projection {
  const char* module;
  model::LoraPair model::LoraLayer::*pair;
  int64_t out;
  int64_t in;
  bool rope_rows = false;  // q and k: output rows are RoPE pairs (see InterleavedRows)
};

std::vector<Projection> Projections(const model::ModelConfig& c) {
  const int64_t D = c.hidden, F = c.ffn_hidden;
  const int64_t qd = int64_t{c.n_heads} * c.head_dim, kvd = int64_t{c.n_kv_heads} * c.head_dim;
  using model::LoraLayer;
  return {{"self_attn.q_proj", &LoraLayer::q, qd, D, true},
          {"self_attn.k_proj", &LoraLayer::k, kvd, D, true},
          {"self_attn.v_proj", &LoraLayer::v, kvd, D},
          {"self_attn.o_proj", &LoraLayer::o, D, qd},
          {"mlp.gate_proj", &LoraLayer::gate, F, D},
          {"mlp.up_proj", &LoraLayer::up, F, D},
          {"mlp.down_proj", &LoraLayer::down, D, F}};
}

// PEFT's B of q and k is in Hugging Face's row order, where RoPE rotates dimension i of a head
// with i + hd/2 (RopeStyle::kHalf). A GGUF llama file stores q/k rows permuted so RoPE rotates
// adjacent pairs (kInterleaved; llama.cpp's convert: HF row h·hd + j·hd/2 + i becomes row
// h·hd + 2i + j), and a model loaded from one computes q/k in that order, so B's rows must follow.
// Returns B [rows, r] as fp32 in the interleaved order.
std::vector<float> InterleavedRows(const kernels::WeightView& b, int64_t head_dim) {
  const int64_t r = b.cols, half = head_dim / 2;
  std::vector<float> hf(b.rows * r), out(b.rows * r);
  kernels::DequantizeRow(hf.data(), b.data, b.type, b.rows * r);
  for (int64_t h = 0; h < b.rows / head_dim; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::copy_n(&hf[(h * head_dim + j * half + i) * r], r,
                    &out[(h * head_dim + 2 * i + j) * r]);
      }
    }
  }
  return out;
}

}  // namespace

std::string LoraTensorName(int32_t layer, std::string_view module, char which) {
  return absl::StrCat("base_model.model.model.layers.", layer, ".", std::string(module), ".lora_",
                      std::string(1, which), ".weight");
}

absl::StatusOr<std::unique_ptr<LookaheadModule>> LookaheadModule::Open(const std::string& path) {
  auto module = std::unique_ptr<LookaheadModule>(new LookaheadModule());
  module->path_ = path;
  absl::StatusOr<std::unique_ptr<model::SafetensorsFile>> file = model::SafetensorsFile::Open(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("lookahead module: ", std::string(file.status().message())));
  }
  module->file_ = *std::move(file);
  RETURN_IF_ERROR(module->ReadMetadata());
  RETURN_IF_ERROR(module->ReadEmbeddings());
  return module;
}

absl::Status LookaheadModule::ReadMetadata() {
  const auto& meta = file_->metadata();
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    const auto it = meta.find(key);
    if (it == meta.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("lookahead module ", path_, ": __metadata__ lacks \"", key, "\""));
    }
    return it->second;
  };
  auto bad = [&](const char* key, const std::string& value, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("lookahead module ", path_, ": metadata \"", key,
                                                   "\" = \"", value, "\", want ", want));
  };
  ASSIGN_OR_RETURN(const std::string alpha, get("lora_alpha"));
  ASSIGN_OR_RETURN(const std::string rank, get("r"));
  ASSIGN_OR_RETURN(const std::string n, get("n_lookahead"));
  ASSIGN_OR_RETURN(base_fingerprint_, get("base_fingerprint"));
  if (!absl::SimpleAtof(alpha, &alpha_) || !std::isfinite(alpha_) || !(alpha_ > 0.0f)) {
    return bad("lora_alpha", alpha, "a finite number > 0");
  }
  if (!absl::SimpleAtoi(rank, &rank_) || rank_ < 1) return bad("r", rank, "an integer >= 1");
  if (!absl::SimpleAtoi(n, &n_lookahead_) || n_lookahead_ < 1) {
    return bad("n_lookahead", n, "an integer >= 1");
  }
  if (base_fingerprint_.empty()) return bad("base_fingerprint", "", "the base model's fingerprint");
  return absl::OkStatus();
}

absl::Status LookaheadModule::ReadEmbeddings() {
  const model::SafetensorsTensor* t = file_->FindTensor(kEmbeddings);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead module ", path_, ": missing tensor ", kEmbeddings));
  }
  if (t->shape.size() != 2 || t->shape[0] != n_lookahead_ || t->shape[1] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lookahead module ", path_, ": tensor ", kEmbeddings, " has shape ", ShapeString(t->shape),
        ", expected [", n_lookahead_, ", D] (n_lookahead = ", n_lookahead_, ")"));
  }
  hidden_ = t->shape[1];
  embeddings_.resize(n_lookahead_ * hidden_);
  kernels::DequantizeRow(embeddings_.data(), t->data, t->type, n_lookahead_ * hidden_);
  return absl::OkStatus();
}

kernels::WeightView LookaheadModule::Interleaved(const std::string& name,
                                                 const kernels::WeightView& b,
                                                 int64_t head_dim) const {
  const std::string key = absl::StrCat(name, "/", head_dim);
  absl::MutexLock lock(&mu_);
  auto it = interleaved_.find(key);
  if (it == interleaved_.end()) it = interleaved_.emplace(key, InterleavedRows(b, head_dim)).first;
  return kernels::WeightView{
      .data = it->second.data(), .type = kernels::DType::kF32, .rows = b.rows, .cols = b.cols};
}

absl::StatusOr<kernels::WeightView> LookaheadModule::View(const std::string& name, int64_t rows,
                                                          int64_t cols) const {
  const model::SafetensorsTensor* t = file_->FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead module ", path_, ": missing tensor ", name));
  }
  if (t->shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(absl::StrCat("lookahead module ", path_, ": tensor ", name,
                                                   " has shape ", ShapeString(t->shape),
                                                   ", expected ", ShapeString({rows, cols})));
  }
  return kernels::WeightView{.data = t->data, .type = t->type, .rows = rows, .cols = cols};
}

absl::StatusOr<model::LoraAdapter> LookaheadModule::AdapterFor(const model::ModelConfig& config,
                                                               std::string_view fingerprint) const {
  if (fingerprint != base_fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lookahead module ", path_, " was made for the model with fingerprint ", base_fingerprint_,
        ", not this model (fingerprint ", std::string(fingerprint), ")"));
  }
  if (hidden_ != config.hidden) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lookahead module ", path_, ": tensor ", kEmbeddings, " has shape [", n_lookahead_, ", ",
        hidden_, "], expected [", n_lookahead_, ", ", config.hidden, "]"));
  }
  model::LoraAdapter adapter;
  adapter.scale = scale();
  adapter.layers.resize(config.n_layers);
  const std::vector<Projection> projections = Projections(config);
  for (int32_t l = 0; l < config.n_layers; ++l) {
    for (const Projection& p : projections) {
      model::LoraPair& pair = adapter.layers[l].*p.pair;
      ASSIGN_OR_RETURN(pair.a, View(LoraTensorName(l, p.module, 'A'), rank_, p.in));
      const std::string b_name = LoraTensorName(l, p.module, 'B');
      ASSIGN_OR_RETURN(pair.b, View(b_name, p.out, rank_));
      if (p.rope_rows && config.rope_style == kernels::RopeStyle::kInterleaved) {
        pair.b = Interleaved(b_name, pair.b, config.head_dim);
      }
    }
  }
  return adapter;
}

}  // namespace glimpse::eviction

// TRIM-KV retention-gate scorer (ngocbh/trimkv src/trimkv/models/qwen3/modeling_trimkv_qwen3.py,
// class RetentionGate, retention_gate = "rg"; scoring in src/trimkv/cache_utils.py compress_layer,
// strategy "alpha"). For each prompt token i with attention input x_i (hidden_states, after
// input_layernorm — the gate reads the same tensor as q_proj) and kv-head h:
//   log β_i[h] = logsigmoid(W₂·silu(W₁ x_i + b₁) + bias)[h]     W₁ [I, D] (I = 512), W₂ [Hkv, I]
//   s[h, i]    = log β_i[h] · (t − pos_i)                          ≤ 0, higher = keep
// act is config.hidden_act, "silu" for Qwen3 / Llama (the only one implemented); bias is
// initialised to 10 in the reference (β ≈ 1, keep everything) before training.
// Choice of t: the reference uses q_idx = get_seq_length() + 1, i.e. after a prefill of T tokens
// t = T + 1 with 0-based positions, so the newest token's exponent is 2. We follow it: t = T + 1
// (T = the prompt length). Any t ≥ max pos + 1 gives the same ranking within one token's β, but
// the ranking across tokens depends on t, so this matches the reference's first compression.
//
// Weights (.safetensors, F32/F16/BF16), the reference checkpoint's own parameter names, per layer
// l:
//   model.layers.{l}.self_attn.retention_gate.linear1.weight [I, D]
//   model.layers.{l}.self_attn.retention_gate.linear1.bias   [I]
//   model.layers.{l}.self_attn.retention_gate.linear2.weight [Hkv, I]
//   model.layers.{l}.self_attn.retention_gate.bias           [Hkv]
// so the gate tensors of a TRIM-KV checkpoint can be used as they are. Layer 0 fixes I, D, Hkv.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/gate_weights.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

constexpr char kPrefix[] = "model.layers.";
constexpr char kGate[] = ".self_attn.retention_gate.";

struct TrimLayer {
  GateTensor w1, b1, w2, bias;
};

class TrimKvGateScorer final : public Scorer {
 public:
  TrimKvGateScorer(int64_t hkv, int64_t inner, int64_t hidden, std::vector<TrimLayer> layers,
                   std::string source)
      : hkv_(hkv),
        inner_(inner),
        hidden_(hidden),
        layers_(std::move(layers)),
        source_(std::move(source)) {}

  std::string_view name() const override { return "trimkv_gate"; }
  uint32_t needs() const override { return kHiddenStates; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    RETURN_IF_ERROR(CheckModel(view));
    const TrimLayer& w = layers_[view.layer];
    const int64_t T = view.n_tokens;
    const float t_now = static_cast<float>(T + 1);           // the reference's q_idx, see above
    std::vector<float> inner(T * inner_), logits(T * hkv_);  // [T, I], [T, Hkv]
    GateMatMul(inner.data(), view.hidden_states, w.w1.data.data(), w.b1.data.data(), T, inner_,
               hidden_);
    for (float& v : inner) v = Silu(v);
    GateMatMul(logits.data(), inner.data(), w.w2.data.data(), w.bias.data.data(), T, hkv_, inner_);
    for (int64_t i = 0; i < T; ++i) {
      const float* logit = &logits[i * hkv_];
      const float age = t_now - static_cast<float>(view.positions[i]);
      for (int64_t h = 0; h < hkv_; ++h) scores[h * T + i] = LogSigmoid(logit[h]) * age;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CheckModel(const LayerView& view) const {
    const std::string where = absl::StrCat("trimkv_gate: weights ", source_, ": ");
    if (view.positions == nullptr) {
      return absl::InvalidArgumentError("trimkv_gate: the layer view lacks positions");
    }
    if (view.n_layers != static_cast<int32_t>(layers_.size()) || view.layer < 0 ||
        view.layer >= view.n_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the file holds ", layers_.size(), " layers ('", kPrefix, "{l}",
                       kGate, "linear1.weight'), the model ", view.n_layers));
    }
    if (view.n_kv_heads != hkv_ || view.hidden != hidden_) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "'", kPrefix, 0, kGate, "linear2.weight' / 'linear1.weight' are for Hkv=", hkv_,
          " D=", hidden_, "; the model has Hkv=", view.n_kv_heads, " D=", view.hidden));
    }
    return absl::OkStatus();
  }

  const int64_t hkv_, inner_, hidden_;
  const std::vector<TrimLayer> layers_;  // [L]
  const std::string source_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewTrimKvGateScorer(const std::string& weights_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GateTensors> file,
                   GateTensors::Open(weights_path, "trimkv_gate"));
  const std::string gate = kGate;
  ASSIGN_OR_RETURN(const int32_t n_layers, file->CountLayers(kPrefix, gate + "linear1.weight"));
  int64_t inner = 0, hidden = 0, hkv = 0;
  {
    ASSIGN_OR_RETURN(GateTensor w1, file->Get(kPrefix + ("0" + gate) + "linear1.weight", {-1, -1}));
    ASSIGN_OR_RETURN(GateTensor w2,
                     file->Get(kPrefix + ("0" + gate) + "linear2.weight", {-1, w1.dim(0)}));
    inner = w1.dim(0), hidden = w1.dim(1), hkv = w2.dim(0);
  }
  if (inner <= 0 || hidden <= 0 || hkv <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("trimkv_gate: weights ", file->source(),
                                                   ": empty dimension in layer 0 (I=", inner,
                                                   " D=", hidden, " Hkv=", hkv, ")"));
  }
  std::vector<TrimLayer> layers(n_layers);
  for (int32_t l = 0; l < n_layers; ++l) {
    const std::string p = absl::StrCat(kPrefix, l, gate);
    ASSIGN_OR_RETURN(layers[l].w1, file->Get(p + "linear1.weight", {inner, hidden}));
    ASSIGN_OR_RETURN(layers[l].b1, file->Get(p + "linear1.bias", {inner}));
    ASSIGN_OR_RETURN(layers[l].w2, file->Get(p + "linear2.weight", {hkv, inner}));
    ASSIGN_OR_RETURN(layers[l].bias, file->Get(p + "bias", {hkv}));
  }
  return std::make_unique<TrimKvGateScorer>(hkv, inner, hidden, std::move(layers), file->source());
}

}  // namespace glimpse::eviction

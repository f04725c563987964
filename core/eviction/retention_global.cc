// Global shared-projection retention scorer (seeded by "Make Each Token Count"-style learned
// retention: one small predictor for the whole model whose scores are comparable across layers,
// so that one global top-k can spend the budget where it matters). Architecture chosen here:
//   logit[l, h, t] = w_h · x_t^(l) + c[l, h]
// x_t^(l) = layer l's attention input (hidden_states, after input_layernorm; RMS-normalised, so
// one projection is meaningful at every depth), w = W[h] one row per kv-head shared by all layers,
// c a per-(layer, kv-head) bias that calibrates layers against each other. s[h, t] = logit
// (unbounded, higher = keep). Its logits compare across layers, so it can drive
// Granularity::kGlobal selection (a model's profile chooses the granularity by measurement);
// per-head and per-layer selection ignore c (a constant per row). Parameters: Hkv·(D + L) in all.
//
// Weights (.safetensors, F32/F16/BF16):
//   retention.weight      [Hkv, D]   W
//   retention.layer_bias  [L, Hkv]   c
// Checked against the model at Score() (Hkv, D, L), errors naming the tensor.
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

class RetentionGlobalScorer final : public Scorer {
 public:
  RetentionGlobalScorer(GateTensor weight, GateTensor layer_bias, std::string source)
      : weight_(std::move(weight)),
        layer_bias_(std::move(layer_bias)),
        source_(std::move(source)) {}

  std::string_view name() const override { return "retention_global"; }
  uint32_t needs() const override { return kHiddenStates; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    const int64_t hkv = weight_.dim(0), D = weight_.dim(1), L = layer_bias_.dim(0);
    if (view.n_kv_heads != hkv || view.hidden != D) {
      return absl::InvalidArgumentError(
          absl::StrCat("retention_global: weights ", source_, ": 'retention.weight' has shape [",
                       hkv, ", ", D, "]; the model has Hkv=", view.n_kv_heads, " D=", view.hidden));
    }
    if (view.n_layers != L || view.layer < 0 || view.layer >= L) {
      return absl::InvalidArgumentError(
          absl::StrCat("retention_global: weights ", source_, ": 'retention.layer_bias' holds ", L,
                       " layers; the model has ", view.n_layers, " (layer ", view.layer, ")"));
    }
    const int64_t T = view.n_tokens;
    const float* bias = &layer_bias_.data[view.layer * hkv];  // [Hkv]
    std::vector<float> logit(hkv);
    for (int64_t t = 0; t < T; ++t) {
      GateMatVec(logit.data(), weight_.data.data(), bias, view.hidden_states + t * D, hkv, D);
      for (int64_t h = 0; h < hkv; ++h) scores[h * T + t] = logit[h];
    }
    return absl::OkStatus();
  }

 private:
  const GateTensor weight_;      // [Hkv, D]
  const GateTensor layer_bias_;  // [L, Hkv]
  const std::string source_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewRetentionGlobalScorer(const std::string& weights_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GateTensors> file,
                   GateTensors::Open(weights_path, "retention_global"));
  ASSIGN_OR_RETURN(GateTensor weight, file->Get("retention.weight", {-1, -1}));
  ASSIGN_OR_RETURN(GateTensor layer_bias, file->Get("retention.layer_bias", {-1, weight.dim(0)}));
  if (weight.dim(0) <= 0 || weight.dim(1) <= 0 || layer_bias.dim(0) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("retention_global: weights ", file->source(),
                     ": empty 'retention.weight' or 'retention.layer_bias'"));
  }
  return std::make_unique<RetentionGlobalScorer>(std::move(weight), std::move(layer_bias),
                                                 file->source());
}

}  // namespace glimpse::eviction

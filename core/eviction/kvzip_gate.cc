// Fast KVzip gate scorer (Janghyun1230/FastKVzip prefill/attention/gate.py, class Weight; paper
// arXiv 2601.17668, "Low-Rank Sink Attention" gate). For each prompt token with attention input x
// (hidden_states, after input_layernorm) and each kv-head h, group member g (G = H / Hkv):
//   q_{h,g}  = RMSNorm(W_q[h,g] x + b_q[h,g]) ⊙ q_norm      (dg = 16 dims, eps 1e-6)
//   k_h      = RMSNorm(W_k[h] x) ⊙ k_norm
//   ℓ        = k_h·q_{h,g} / √dg + b[h, g]
//   base_s   = k_base[h, s]·q_{h,g} / √dg                   s = 1..S (S = 16 sinks)
//   score_g  = 1 / (1 + Σ_s exp(base_s − ℓ))
//   s[h, t]  = mean over g of score_g                        ∈ (0, 1], higher = keep
// The reference's rows of q_proj are laid out (h, g, dg) (view(nseq, nhead, -1, dg)); k_proj's
// (h, dg). Defaults of the released gates: dg = 16, S = 16 ("q{G}_dim16_sink16").
//
// Weights (.safetensors, F32/F16/BF16), per layer l, the reference's state_dict keys under
// "layers.{l}.":
//   layers.{l}.q_proj.weight [Hkv·G·dg, D]   layers.{l}.q_proj.bias [Hkv·G·dg]
//   layers.{l}.k_proj.weight [Hkv·dg, D]     layers.{l}.q_norm.weight [dg]
//   layers.{l}.k_norm.weight [dg]            layers.{l}.k_base [Hkv, 1, S, dg]
//   layers.{l}.b [Hkv, 1, G]
// Layer 0 fixes Hkv, G, dg, S and D; every layer must match. The model is checked against them at
// Score() (Hkv, H / Hkv, D and the layer count), errors naming the tensor.
#include <cmath>
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

constexpr float kRmsEps = 1e-6f;  // Qwen3RMSNorm's default; the reference builds it without eps

struct KvzipLayer {
  GateTensor wq, bq, wk, q_norm, k_norm, k_base, b;
};

struct KvzipDims {
  int64_t hkv = 0, group = 0, dg = 0, sinks = 0, hidden = 0;
};

absl::StatusOr<KvzipLayer> LoadLayer(const GateTensors& file, int32_t l, const KvzipDims& d) {
  const std::string p = absl::StrCat("layers.", l, ".");
  KvzipLayer w;
  ASSIGN_OR_RETURN(w.wq, file.Get(p + "q_proj.weight", {d.hkv * d.group * d.dg, d.hidden}));
  ASSIGN_OR_RETURN(w.bq, file.Get(p + "q_proj.bias", {d.hkv * d.group * d.dg}));
  ASSIGN_OR_RETURN(w.wk, file.Get(p + "k_proj.weight", {d.hkv * d.dg, d.hidden}));
  ASSIGN_OR_RETURN(w.q_norm, file.Get(p + "q_norm.weight", {d.dg}));
  ASSIGN_OR_RETURN(w.k_norm, file.Get(p + "k_norm.weight", {d.dg}));
  ASSIGN_OR_RETURN(w.k_base, file.Get(p + "k_base", {d.hkv, 1, d.sinks, d.dg}));
  ASSIGN_OR_RETURN(w.b, file.Get(p + "b", {d.hkv, 1, d.group}));
  return w;
}

class KvzipGateScorer final : public Scorer {
 public:
  KvzipGateScorer(KvzipDims dims, std::vector<KvzipLayer> layers, std::string source)
      : d_(dims), layers_(std::move(layers)), source_(std::move(source)) {}

  std::string_view name() const override { return "kvzip_gate"; }
  uint32_t needs() const override { return kHiddenStates; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    RETURN_IF_ERROR(CheckModel(view));
    const KvzipLayer& w = layers_[view.layer];
    const int64_t T = view.n_tokens, G = d_.group, dg = d_.dg, S = d_.sinks;
    const float inv_scale = 1.0f / std::sqrt(static_cast<float>(dg));
    const int64_t nq = d_.hkv * G * dg, nk = d_.hkv * dg;
    std::vector<float> q_all(T * nq), k_all(T * nk);  // [T, Hkv, G, dg], [T, Hkv, dg]
    GateMatMul(q_all.data(), view.hidden_states, w.wq.data.data(), w.bq.data.data(), T, nq,
               d_.hidden);
    GateMatMul(k_all.data(), view.hidden_states, w.wk.data.data(), nullptr, T, nk, d_.hidden);
    for (int64_t t = 0; t < T; ++t) {
      float* q = &q_all[t * nq];
      float* k = &k_all[t * nk];
      for (int64_t h = 0; h < d_.hkv; ++h) {
        float* kh = &k[h * dg];
        GateRmsNorm(kh, w.k_norm.data.data(), dg, kRmsEps);
        float sum = 0.0f;
        for (int64_t g = 0; g < G; ++g) {
          float* qg = &q[(h * G + g) * dg];
          GateRmsNorm(qg, w.q_norm.data.data(), dg, kRmsEps);
          const float logit = Dot(kh, qg, dg) * inv_scale + w.b.data[h * G + g];
          float denom = 1.0f;
          for (int64_t s = 0; s < S; ++s) {
            const float base = Dot(&w.k_base.data[(h * S + s) * dg], qg, dg) * inv_scale;
            denom += std::exp(base - logit);
          }
          sum += 1.0f / denom;
        }
        scores[h * T + t] = sum / static_cast<float>(G);
      }
    }
    return absl::OkStatus();
  }

 private:
  static float Dot(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
  }

  absl::Status CheckModel(const LayerView& view) const {
    const std::string where = absl::StrCat("kvzip_gate: weights ", source_, ": ");
    if (view.layer < 0 || view.layer >= static_cast<int32_t>(layers_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "no tensors for layer ", view.layer, " ('layers.", view.layer,
                       ".q_proj.weight'); the file holds ", layers_.size(), " layers"));
    }
    if (view.n_layers != static_cast<int32_t>(layers_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, "the file holds ", layers_.size(),
                                                     " layers, the model ", view.n_layers));
    }
    if (view.n_kv_heads != d_.hkv || view.n_heads != d_.hkv * d_.group ||
        view.hidden != d_.hidden) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "'layers.0.q_proj.weight' / 'layers.0.b' are for Hkv=", d_.hkv,
                       " G=", d_.group, " D=", d_.hidden, "; the model has Hkv=", view.n_kv_heads,
                       " H=", view.n_heads, " D=", view.hidden));
    }
    return absl::OkStatus();
  }

  const KvzipDims d_;
  const std::vector<KvzipLayer> layers_;  // [L]
  const std::string source_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewKvzipGateScorer(const std::string& weights_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GateTensors> file,
                   GateTensors::Open(weights_path, "kvzip_gate"));
  ASSIGN_OR_RETURN(const int32_t n_layers, file->CountLayers("layers.", ".q_proj.weight"));
  KvzipDims d;
  {
    ASSIGN_OR_RETURN(GateTensor q_norm, file->Get("layers.0.q_norm.weight", {-1}));
    ASSIGN_OR_RETURN(GateTensor k_base, file->Get("layers.0.k_base", {-1, 1, -1, q_norm.dim(0)}));
    ASSIGN_OR_RETURN(GateTensor b, file->Get("layers.0.b", {k_base.dim(0), 1, -1}));
    ASSIGN_OR_RETURN(GateTensor wk, file->Get("layers.0.k_proj.weight", {-1, -1}));
    d = {.hkv = k_base.dim(0),
         .group = b.dim(2),
         .dg = q_norm.dim(0),
         .sinks = k_base.dim(2),
         .hidden = wk.dim(1)};
  }
  if (d.hkv <= 0 || d.group <= 0 || d.dg <= 0 || d.hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kvzip_gate: weights ", file->source(), ": empty dimension in layer 0 (Hkv=", d.hkv,
        " G=", d.group, " dg=", d.dg, " D=", d.hidden, ")"));
  }
  std::vector<KvzipLayer> layers;
  for (int32_t l = 0; l < n_layers; ++l) {
    ASSIGN_OR_RETURN(KvzipLayer layer, LoadLayer(*file, l, d));
    layers.push_back(std::move(layer));
  }
  return std::make_unique<KvzipGateScorer>(d, std::move(layers), file->source());
}

}  // namespace glimpse::eviction

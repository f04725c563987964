// CAKE: Cascading and Adaptive KV cache Eviction with layer preferences (antgroup/cakekv
// cake/model/modify_qwen2.py, prefill branch of the attention forward; cake/utils.py
// calculate_entropy; paper arXiv 2503.12491). With A_h[i, j] = softmax_j(q_i·k_j / √hd) the
// window attention (W last prompt queries × all T keys, causal in the window, fp32; as SnapKV) and
// n = T − W keys before the window:
//   token score   s_h[j] = mean_i A_h[i, j] + γ·var_i A_h[i, j]        j < n, var unbiased (torch)
//                 s_h    = avg_pool1d(s_h, k = 5, padding 2, count_include_pad)
//                 s[kv, j] = mean over the GQA group;  window keys: max of the layer + 1 (kept)
//   preference    H_l = −Σ_{h, i, j<n} A log(A + 1e−10)                  (dispersion, entropy)
//                 V_l = Σ_{h, j<n} var_i A_h[i, j]                        (temporal shift)
//                 P_l = H_l^{1/τ1} · V_l^{1/τ2}
// Schedule::kCake then gives layer l the budget ∝ P_l (selection.h). Defaults: W = 32, k = 5, avg,
// γ = 200, τ1 = τ2 = 1 (experiments/LongBench/pred_cake.py's argument defaults; the paper tunes
// τ per model and budget in config/model2tau.json, e.g. Llama-3.1-8B at 1024: τ1 = 1.6, τ2 = 0.4).
// Edge cases: W = 1 has no variance (torch gives NaN): var = 0. T == W: all scores 1. A P_l that
// is 0 or not finite (no keys outside the window, no spread) becomes the smallest normal double,
// so the layer gets about its minimum budget instead of failing selection.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

constexpr double kEntropyEps = 1e-10;  // cake/utils.py calculate_entropy

class CakeScorer final : public Scorer {
 public:
  CakeScorer(int64_t window, int64_t kernel, Pooling pooling, double tau1, double tau2,
             double gamma)
      : window_(window),
        kernel_(kernel),
        pooling_(pooling),
        tau1_(tau1),
        tau2_(tau2),
        gamma_(gamma) {}

  std::string_view name() const override { return "cake"; }
  uint32_t needs() const override { return kKeys | kWindowQueries; }
  int64_t window() const override { return window_; }
  bool has_layer_preference() const override { return true; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    double preference = 0.0;
    return ScoreWithPreference(view, scores, &preference);
  }

  absl::Status ScoreWithPreference(const LayerView& view, float* scores,
                                   double* preference) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    RETURN_IF_ERROR(ValidateWindow(view, window_, name()));
    const int64_t T = view.n_tokens, W = window_, n = T - W;
    const int32_t H = view.n_heads, Hkv = view.n_kv_heads;
    *preference = std::numeric_limits<double>::min();
    if (n == 0) {
      std::fill(scores, scores + Hkv * T, 1.0f);
      return absl::OkStatus();
    }
    std::vector<float> probs(W * T);     // [W, T] of one head
    std::vector<float> row(n);           // [n] mean + γ·var of one head
    std::vector<float> per_head(H * n);  // [H, n] pooled
    double entropy = 0.0, variance = 0.0;
    for (int32_t h = 0; h < H; ++h) {
      WindowAttention(view, W, h, probs.data());
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t i = 0; i < W; ++i) {
          const double p = probs[i * T + j];
          sum += p;
          entropy -= p * std::log(p + kEntropyEps);
        }
        const double mean = sum / static_cast<double>(W);
        double ss = 0.0;
        for (int64_t i = 0; i < W; ++i) ss += (probs[i * T + j] - mean) * (probs[i * T + j] - mean);
        const double var = W > 1 ? ss / static_cast<double>(W - 1) : 0.0;
        variance += var;
        row[j] = static_cast<float>(mean + gamma_ * var);
      }
      Pool1d(per_head.data() + h * n, row.data(), n, kernel_, pooling_);
    }
    std::vector<float> grouped(Hkv * n);  // [Hkv, n]
    MeanOverGroup(grouped.data(), per_head.data(), H, Hkv, n);
    const float window_score = MaxOf(grouped.data(), Hkv * n) + 1.0f;
    for (int32_t kv = 0; kv < Hkv; ++kv) {
      std::copy_n(grouped.data() + kv * n, n, scores + kv * T);
      std::fill(scores + kv * T + n, scores + (kv + 1) * T, window_score);
    }
    const double p = std::pow(entropy, 1.0 / tau1_) * std::pow(variance, 1.0 / tau2_);
    if (std::isfinite(p) && p > *preference) *preference = p;
    return absl::OkStatus();
  }

 private:
  const int64_t window_;
  const int64_t kernel_;
  const Pooling pooling_;
  const double tau1_, tau2_, gamma_;
};

}  // namespace

std::unique_ptr<Scorer> NewCakeScorer(int64_t window, int64_t kernel, Pooling pooling, double tau1,
                                      double tau2, double gamma) {
  return std::make_unique<CakeScorer>(window, kernel, pooling, tau1, tau2, gamma);
}

}  // namespace glimpse::eviction

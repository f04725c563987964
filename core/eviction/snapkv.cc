// SnapKV, as kvpress implements it (NVIDIA/kvpress kvpress/presses/snapkv_press.py, SnapKVPress
// .score, kvpress 0.5.5; paper arXiv 2404.14469, FasterDecoding/SnapKV snapkv_utils.py):
//   A_h[i, j] = softmax_j(q_i·k_j / √hd)   W window queries × all T keys, causal in the window,
//   fp32 s_h[j]    = mean_i A_h[i, j]           for the T − W keys before the window (kvpress:
//   mean;
//                                           the original sums, which ranks identically)
//   s_h       = pool_k(s_h)                avg_pool1d(kernel k, padding k/2, count_include_pad)
//                                           over those T − W keys only (the window is not pooled
//                                           in)
//   s[kv, j]  = mean over the GQA group of s_h[j]
//   s[kv, j]  = max over the whole layer of s + 1 for the W window keys (never pruned)
// Defaults (kvpress): W = 64, k = 5, avg. With T == W every entry is in the window (kvpress
// asserts T > W): all scores are 1.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

class SnapKvScorer final : public Scorer {
 public:
  SnapKvScorer(int64_t window, int64_t kernel, Pooling pooling)
      : window_(window), kernel_(kernel), pooling_(pooling) {}

  std::string_view name() const override { return "snapkv"; }
  uint32_t needs() const override { return kKeys | kWindowQueries; }
  int64_t window() const override { return window_; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    RETURN_IF_ERROR(ValidateWindow(view, window_, name()));
    const int64_t T = view.n_tokens, W = window_, n = T - W;  // n keys outside the window
    const int32_t H = view.n_heads, Hkv = view.n_kv_heads;
    if (n == 0) {
      std::fill(scores, scores + Hkv * T, 1.0f);
      return absl::OkStatus();
    }
    std::vector<float> probs(W * T);     // [W, T] of one head
    std::vector<float> mean(n);          // [n]
    std::vector<float> per_head(H * n);  // [H, n] pooled
    for (int32_t h = 0; h < H; ++h) {
      WindowAttention(view, W, h, probs.data());
      WindowMean(probs.data(), W, T, n, mean.data());
      Pool1d(per_head.data() + h * n, mean.data(), n, kernel_, pooling_);
    }
    std::vector<float> grouped(Hkv * n);  // [Hkv, n]
    MeanOverGroup(grouped.data(), per_head.data(), H, Hkv, n);
    const float window_score = MaxOf(grouped.data(), Hkv * n) + 1.0f;
    for (int32_t kv = 0; kv < Hkv; ++kv) {
      std::copy_n(grouped.data() + kv * n, n, scores + kv * T);
      std::fill(scores + kv * T + n, scores + (kv + 1) * T, window_score);
    }
    return absl::OkStatus();
  }

 private:
  const int64_t window_;
  const int64_t kernel_;
  const Pooling pooling_;
};

}  // namespace

std::unique_ptr<Scorer> NewSnapKvScorer(int64_t window, int64_t kernel, Pooling pooling) {
  return std::make_unique<SnapKvScorer>(window, kernel, pooling);
}

}  // namespace glimpse::eviction

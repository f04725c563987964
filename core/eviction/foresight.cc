// ForesightKV scorer (arXiv 2602.03203, RUCAIBox/ForesightKV): a small MLP per (layer, kv-head)
// over each entry's key, value and statistics of the recent queries' attention to it, trained
// (tools/foresight/train.py) to rank entries by the attention future tokens will pay them (Golden
// Eviction targets, pairwise ranking loss). Meant for decode-time eviction of long generations
// (decode_eviction.h: the window is the last W generated tokens); it scores a prompt the same way
// (the window is the prompt's last W tokens).
//
// For a kv-head with T entries and the W window queries of its G query heads, p[g, i, j] =
// WindowAttention (window_attention.h: softmax over all T entries, causal inside the window,
// absent rows all zero). Per entry j and query head g, eight statistics:
//   mean_i p, max_i p, p of the last row, mean of the last 8 rows' p, and ln(x + 1e-6) of each;
// features x_j = [key_j (hd), value_j (hd), stats (G × 8, head-major)], F = 2·hd + 8·G, the key
// post-RoPE in the half-rotation layout (dims i and i + hd/2 rotate together, as in Hugging Face
// models; an interleaved-RoPE model's keys are reordered, so weights trained on either runtime
// read the same features), and
//   score_j = w2 · gelu(W1 x_j + b1) + b2     (exact erf GELU, 16 hidden units).
// tools/foresight/foresight_lib.py is the PyTorch definition; tests/foresight_artifact_test.cc
// compares the two on the committed weights.
//
// Weights (.safetensors, F32/F16/BF16):
//   foresight.w1 [L, Hkv, 16, F]   foresight.b1 [L, Hkv, 16]
//   foresight.w2 [L, Hkv, 16]      foresight.b2 [L, Hkv]
//   foresight.window [1]           W (an integer >= 1)
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/gate_weights.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"
#include "kernels/ops.h"

namespace glimpse::eviction {
namespace {

constexpr int64_t kHidden = 16;
constexpr int64_t kStats = 8;
constexpr int64_t kRecentRows = 8;
constexpr float kLogEps = 1e-6f;

float Gelu(float x) { return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f))); }

class ForesightScorer final : public Scorer {
 public:
  ForesightScorer(GateTensor w1, GateTensor b1, GateTensor w2, GateTensor b2, int64_t window,
                  std::string source)
      : w1_(std::move(w1)),
        b1_(std::move(b1)),
        w2_(std::move(w2)),
        b2_(std::move(b2)),
        window_(window),
        source_(std::move(source)) {}

  std::string_view name() const override { return "foresightkv"; }
  uint32_t needs() const override { return kKeys | kValues | kWindowQueries; }
  int64_t window() const override { return window_; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    RETURN_IF_ERROR(ValidateWindow(view, window_, name()));
    RETURN_IF_ERROR(CheckModel(view));
    const int64_t T = view.n_tokens, W = window_, hd = view.head_dim;
    const int32_t group = view.n_heads / view.n_kv_heads;
    const int64_t F = w1_.dim(3);
    std::vector<float> probs(W * T), stats(T * group * kStats), x(T * F), h(T * kHidden);
    for (int32_t kv = 0; kv < view.n_kv_heads; ++kv) {
      for (int32_t g = 0; g < group; ++g) {
        WindowAttention(view, W, kv * group + g, probs.data());
        Stats(probs.data(), W, T, g, group, stats.data());
      }
      const float* keys = view.keys + kv * T * hd;
      const float* values = view.values + kv * T * hd;
      for (int64_t j = 0; j < T; ++j) {  // x: [T, F]
        float* row = &x[j * F];
        CopyKey(keys + j * hd, hd, view.rope_style, row);
        std::copy(values + j * hd, values + (j + 1) * hd, row + hd);
        std::copy(&stats[j * group * kStats], &stats[(j + 1) * group * kStats], row + 2 * hd);
      }
      const int64_t head = int64_t{view.layer} * w1_.dim(1) + view.first_kv_head + kv;
      GateMatMul(h.data(), x.data(), &w1_.data[head * kHidden * F], &b1_.data[head * kHidden], T,
                 kHidden, F);
      const float* w2 = &w2_.data[head * kHidden];
      for (int64_t j = 0; j < T; ++j) {
        float score = b2_.data[head];
        for (int64_t u = 0; u < kHidden; ++u) score += w2[u] * Gelu(h[j * kHidden + u]);
        scores[kv * T + j] = score;
      }
    }
    return absl::OkStatus();
  }

 private:
  // A key in the half-rotation layout the weights read (Hugging Face's, where dims i and
  // i + hd/2 rotate together): an interleaved-RoPE model's pairs (2i, 2i + 1) go to (i, i + hd/2).
  static void CopyKey(const float* key, int64_t hd, kernels::RopeStyle style, float* out) {
    if (style == kernels::RopeStyle::kHalf) {
      std::copy(key, key + hd, out);
      return;
    }
    for (int64_t i = 0; i < hd / 2; ++i) {
      out[i] = key[2 * i];
      out[i + hd / 2] = key[2 * i + 1];
    }
  }

  // The eight statistics of every entry j from query head g's probs [W, T] into
  // stats[(j · group + g) · 8 ...], rows read in order.
  static void Stats(const float* probs, int64_t W, int64_t T, int32_t g, int32_t group,
                    float* stats) {
    std::vector<float> sum(T, 0.0f), top(T, 0.0f), recent(T, 0.0f);
    for (int64_t i = 0; i < W; ++i) {
      const float* row = probs + i * T;
      const bool is_recent = i >= W - kRecentRows;
      for (int64_t j = 0; j < T; ++j) {
        sum[j] += row[j];
        top[j] = std::max(top[j], row[j]);
        if (is_recent) recent[j] += row[j];
      }
    }
    const float* last = probs + (W - 1) * T;
    const float n_recent = static_cast<float>(std::min(W, kRecentRows));
    for (int64_t j = 0; j < T; ++j) {
      const float raw[4] = {sum[j] / static_cast<float>(W), top[j], last[j], recent[j] / n_recent};
      float* out = &stats[(j * group + g) * kStats];
      for (int k = 0; k < 4; ++k) {
        out[k] = raw[k];
        out[4 + k] = std::log(raw[k] + kLogEps);
      }
    }
  }

  absl::Status CheckModel(const LayerView& view) const {
    const int64_t group = view.n_heads / view.n_kv_heads;
    const int64_t F = 2 * int64_t{view.head_dim} + kStats * group;
    if (view.n_layers != w1_.dim(0) || view.layer < 0 || view.layer >= view.n_layers ||
        view.first_kv_head < 0 || view.first_kv_head + view.n_kv_heads > w1_.dim(1) ||
        F != w1_.dim(3)) {
      return absl::InvalidArgumentError(
          absl::StrCat("foresightkv: weights ", source_, ": 'foresight.w1' is [", w1_.dim(0), ", ",
                       w1_.dim(1), ", ", kHidden, ", ", w1_.dim(3),
                       "] (layers, kv-heads, units, 2·hd + 8·G); the model "
                       "has ",
                       view.n_layers, " layers, kv-heads ", view.first_kv_head, "..",
                       view.first_kv_head + view.n_kv_heads - 1, " and 2·hd + 8·G = ", F));
    }
    return absl::OkStatus();
  }

  const GateTensor w1_, b1_, w2_, b2_;
  const int64_t window_;
  const std::string source_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewForesightScorer(const std::string& weights_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GateTensors> file,
                   GateTensors::Open(weights_path, "foresightkv"));
  ASSIGN_OR_RETURN(GateTensor w1, file->Get("foresight.w1", {-1, -1, kHidden, -1}));
  const int64_t L = w1.dim(0), Hkv = w1.dim(1);
  ASSIGN_OR_RETURN(GateTensor b1, file->Get("foresight.b1", {L, Hkv, kHidden}));
  ASSIGN_OR_RETURN(GateTensor w2, file->Get("foresight.w2", {L, Hkv, kHidden}));
  ASSIGN_OR_RETURN(GateTensor b2, file->Get("foresight.b2", {L, Hkv}));
  ASSIGN_OR_RETURN(GateTensor window, file->Get("foresight.window", {1}));
  const float w = window.data[0];
  if (L < 1 || Hkv < 1 || w1.dim(3) < 1 || !(w >= 1.0f && w <= 4096.0f) || w != std::floor(w)) {
    return absl::InvalidArgumentError(absl::StrCat("foresightkv: weights ", file->source(),
                                                   ": empty 'foresight.w1' or 'foresight.window' ",
                                                   w, " is not an integer in [1, 4096]"));
  }
  return std::make_unique<ForesightScorer>(std::move(w1), std::move(b1), std::move(w2),
                                           std::move(b2), static_cast<int64_t>(w), file->source());
}

}  // namespace glimpse::eviction

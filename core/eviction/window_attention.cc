#include "core/eviction/window_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "kernels/matmul.h"

namespace glimpse::eviction {
namespace {

struct NeedName {
  Need need;
  const char* name;
};

constexpr NeedName kNeedNames[] = {
    {kHiddenStates, "hidden_states"},
    {kKeys, "keys"},
    {kValues, "values"},
    {kWindowQueries, "window_queries"},
    {kPreRopeQueries, "pre_rope_queries"},
    {kAccumulatedAttention, "accumulated_attention"},
    {kLayerWeights, "weights"},
    {kLookaheadAttention, "lookahead_attention"},
};

bool Present(const LayerView& view, Need need) {
  switch (need) {
    case kHiddenStates:
      return view.hidden_states != nullptr;
    case kKeys:
      return view.keys != nullptr;
    case kValues:
      return view.values != nullptr;
    case kWindowQueries:
      return view.window_queries != nullptr && view.window > 0;
    case kPreRopeQueries:
      return view.pre_rope_queries != nullptr && view.rope_inv_freq != nullptr;
    case kAccumulatedAttention:
      return view.accumulated_attention != nullptr;
    case kLayerWeights:
      return view.weights != nullptr;
    case kLookaheadAttention:
      return view.lookahead_attention != nullptr;
  }
  return false;
}

}  // namespace

absl::Status ValidateView(const LayerView& view, uint32_t needs, std::string_view scorer,
                          const float* scores) {
  const std::string who(scorer);
  if (scores == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": scores is null"));
  if (view.n_heads <= 0 || view.n_kv_heads <= 0 || view.n_heads % view.n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": bad head counts H=", view.n_heads, " Hkv=", view.n_kv_heads));
  }
  if (view.head_dim <= 0 || view.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": bad head_dim ", view.head_dim));
  }
  if (view.n_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": n_tokens is ", view.n_tokens));
  }
  for (const NeedName& n : kNeedNames) {
    if ((needs & n.need) != 0 && !Present(view, n.need)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": the layer view lacks ", n.name, " (layer ", view.layer, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateWindow(const LayerView& view, int64_t window, std::string_view scorer) {
  if (view.n_tokens < window) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(scorer), ": T=", view.n_tokens,
                                                   " is shorter than the window W=", window));
  }
  if (view.window < window || view.window > view.n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(scorer), ": the view holds ", view.window,
                     " window queries for T=", view.n_tokens, ", need W=", window));
  }
  return absl::OkStatus();
}

void WindowAttention(const LayerView& view, int64_t window, int32_t head, float* probs) {
  const int64_t T = view.n_tokens, hd = view.head_dim;
  const int32_t group = view.n_heads / view.n_kv_heads;
  // [window, hd]: the last `window` of the view's window queries of this head.
  const float* q = view.window_queries + (head * view.window + (view.window - window)) * hd;
  const float* k = view.keys + (head / group) * T * hd;  // [T, hd]
  // logits [window, T] = q · kᵀ (keys as the rows of an fp32 weight matrix).
  kernels::ThreadPool pool(1);
  kernels::MatMul(probs, q, kernels::WeightView{k, kernels::DType::kF32, T, hd}, window, pool);
  const float scale = std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < window; ++i) {
    float* row = probs + i * T;
    if (std::isnan(q[i * hd])) {  // an absent query (window_attention.h): no attention at all
      std::fill(row, row + T, 0.0f);
      continue;
    }
    const int64_t visible = T - window + i + 1;  // causal: keys [0, T − W + i]
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < visible; ++j) {
      row[j] /= scale;  // kvpress: matmul(q, kᵀ) / sqrt(head_dim)
      mx = std::max(mx, row[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) row[j] *= inv;
    std::fill(row + visible, row + T, 0.0f);
  }
}

void WindowMean(const float* probs, int64_t window, int64_t T, int64_t n, float* mean) {
  std::fill(mean, mean + n, 0.0f);
  for (int64_t i = 0; i < window; ++i) {
    for (int64_t j = 0; j < n; ++j) mean[j] += probs[i * T + j];
  }
  for (int64_t j = 0; j < n; ++j) mean[j] /= static_cast<float>(window);
}

void MeanOverGroup(float* out, const float* x, int32_t n_heads, int32_t n_kv_heads, int64_t n) {
  const int32_t group = n_heads / n_kv_heads;
  for (int32_t kv = 0; kv < n_kv_heads; ++kv) {
    float* o = out + kv * n;
    std::fill(o, o + n, 0.0f);
    for (int32_t g = 0; g < group; ++g) {
      const float* xh = x + (kv * group + g) * n;
      for (int64_t j = 0; j < n; ++j) o[j] += xh[j];
    }
    for (int64_t j = 0; j < n; ++j) o[j] /= static_cast<float>(group);
  }
}

void Pool1d(float* out, const float* x, int64_t n, int64_t kernel, Pooling pooling) {
  const int64_t pad = kernel / 2;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t lo = std::max<int64_t>(0, j - pad), hi = std::min(n, j + pad + 1);
    if (pooling == Pooling::kAvg) {
      float sum = 0.0f;
      for (int64_t m = lo; m < hi; ++m) sum += x[m];
      out[j] = sum / static_cast<float>(kernel);  // the zero padding counts in the divisor
    } else {
      float mx = x[lo];
      for (int64_t m = lo + 1; m < hi; ++m) mx = std::max(mx, x[m]);
      out[j] = mx;
    }
  }
}

float MaxOf(const float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

}  // namespace glimpse::eviction

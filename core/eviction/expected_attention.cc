// Expected attention, as kvpress implements it (NVIDIA/kvpress kvpress/presses/
// expected_attention_press.py, ExpectedAttentionPress, kvpress 0.5.5) with its
// defaults n_future_positions = 512, n_sink = 4, use_covariance, use_vnorm, epsilon = 0:
//   μ_h, Σ_h  mean and covariance (divided by N) of the pre-RoPE queries of prompt tokens
//             t in [4, T) (the sinks' queries are left out as outliers), N = T − 4
//   R̄        the RoPE rotation averaged over positions T .. T + 511 (the next 512 queries):
//             for each frequency i, c̄_i = mean cos(p·f_i), s̄_i = mean sin(p·f_i), rotating the
//             channel pair (a, b) = (i, i + hd/2) for RopeStyle::kHalf or (2i, 2i + 1) for
//             kInterleaved: a' = c̄·a − s̄·b, b' = s̄·a + c̄·b
//   μ'_h = R̄ μ_h,  Σ'_h = R̄ Σ_h R̄ᵀ
//   z_h[j] = μ'_h·k_j / √hd + ½ k_jᵀ Σ'_h k_j / hd      post-RoPE keys j in [4, T)
//   s[kv, j] = (mean over the group of softmax_j z_h[j]) · ‖v_j‖₂      (softmax over j in [4, T))
//   s[kv, j] = max over the whole layer of s + 1 for the 4 sinks.
// kvpress asserts T > 4; here T <= 4 is InvalidArgument.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/matmul.h"

namespace glimpse::eviction {
namespace {

constexpr int64_t kSinks = 4;
constexpr int64_t kFuturePositions = 512;
constexpr int64_t kKeyChunk = 1024;  // keys per MatMul call (bounds the scratch)

// Rotated query statistics of every head: mu [H, hd], cov [H, hd, hd] (fp32, as the scorer uses
// them), computed in double.
struct QueryStats {
  std::vector<float> mu;
  std::vector<float> cov;
};

// R̄ for the positions T .. T + 511. Each row a has two non-zeros: R̄[a, a] = diag[a] and
// R̄[a, partner[a]] = off[a] (−s̄ for the pair's first channel, +s̄ for its second).
struct AverageRotation {
  std::vector<double> diag, off;
  std::vector<int64_t> partner;
  double At(int64_t a, int64_t e) const {
    return e == a ? diag[a] : (e == partner[a] ? off[a] : 0.0);
  }
};

AverageRotation MakeAverageRotation(const LayerView& view) {
  const int64_t hd = view.head_dim, half = hd / 2;
  const bool interleaved = view.rope_style == kernels::RopeStyle::kInterleaved;
  AverageRotation r{std::vector<double>(hd), std::vector<double>(hd), std::vector<int64_t>(hd)};
  for (int64_t i = 0; i < half; ++i) {
    double c = 0.0, s = 0.0;
    for (int64_t p = view.n_tokens; p < view.n_tokens + kFuturePositions; ++p) {
      // θ in fp32 as the model's RoPE (and transformers' rotary embedding) computes it.
      const float theta = static_cast<float>(p) * view.rope_inv_freq[i];
      c += std::cos(static_cast<double>(theta));
      s += std::sin(static_cast<double>(theta));
    }
    c /= kFuturePositions;
    s /= kFuturePositions;
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    r.diag[a] = r.diag[b] = c;
    r.partner[a] = b;
    r.partner[b] = a;
    r.off[a] = -s;
    r.off[b] = s;
  }
  return r;
}

// mu [hd], cov [hd, hd]: moments of head h's pre-RoPE queries over tokens [kSinks, T).
void QueryMoments(const LayerView& view, int32_t h, std::vector<double>& mu,
                  std::vector<double>& cov) {
  const int64_t T = view.n_tokens, hd = view.head_dim, N = T - kSinks;
  const int32_t H = view.n_heads;
  std::fill(mu.begin(), mu.end(), 0.0);
  for (int64_t t = kSinks; t < T; ++t) {
    const float* q = view.pre_rope_queries + (t * H + h) * hd;  // [hd]
    for (int64_t c = 0; c < hd; ++c) mu[c] += q[c];
  }
  for (double& m : mu) m /= static_cast<double>(N);
  // centered [hd, N] (transposed), so Σ·N = centered · centeredᵀ is one fp32 sgemm, as kvpress's
  // einsum over the (fp32) queries.
  std::vector<float> centered(hd * N), gram(hd * hd);
  for (int64_t t = kSinks; t < T; ++t) {
    const float* q = view.pre_rope_queries + (t * H + h) * hd;
    for (int64_t c = 0; c < hd; ++c)
      centered[c * N + t - kSinks] = static_cast<float>(q[c] - mu[c]);
  }
  kernels::ThreadPool pool(1);
  kernels::MatMul(gram.data(), centered.data(),
                  kernels::WeightView{centered.data(), kernels::DType::kF32, hd, N}, hd, pool);
  for (int64_t i = 0; i < hd * hd; ++i) cov[i] = gram[i];
  for (double& c : cov) c /= static_cast<double>(N);
}

QueryStats RotatedQueryStats(const LayerView& view) {
  const int64_t hd = view.head_dim;
  const int32_t H = view.n_heads;
  const AverageRotation r = MakeAverageRotation(view);
  QueryStats out{std::vector<float>(H * hd), std::vector<float>(H * hd * hd)};
  std::vector<double> mu(hd), cov(hd * hd);
  for (int32_t h = 0; h < H; ++h) {
    QueryMoments(view, h, mu, cov);
    // μ' = R̄ μ and Σ' = R̄ Σ R̄ᵀ, summing over the two non-zeros of each row of R̄.
    for (int64_t a = 0; a < hd; ++a) {
      out.mu[h * hd + a] = static_cast<float>(r.diag[a] * mu[a] + r.off[a] * mu[r.partner[a]]);
    }
    float* cov_out = out.cov.data() + h * hd * hd;
    for (int64_t a = 0; a < hd; ++a) {
      for (int64_t b = 0; b < hd; ++b) {
        double sum = 0.0;
        for (const int64_t e : {a, r.partner[a]}) {
          for (const int64_t f : {b, r.partner[b]})
            sum += r.At(a, e) * cov[e * hd + f] * r.At(b, f);
        }
        cov_out[a * hd + b] = static_cast<float>(sum);
      }
    }
  }
  return out;
}

// z [G, n]: the logits of the group's heads for the keys [kSinks, T) of kv-head `kv`.
void GroupLogits(const LayerView& view, const QueryStats& stats, int32_t kv, float* z) {
  const int64_t T = view.n_tokens, hd = view.head_dim, n = T - kSinks;
  const int32_t group = view.n_heads / view.n_kv_heads;
  const float* keys = view.keys + (kv * T + kSinks) * hd;  // [n, hd]
  // The group's Σ' stacked as the rows of one fp32 matrix [G·hd, hd] (Σ' is symmetric).
  const kernels::WeightView covs{stats.cov.data() + kv * group * hd * hd, kernels::DType::kF32,
                                 group * hd, hd};
  const float sqrt_d = std::sqrt(static_cast<float>(hd));
  kernels::ThreadPool pool(1);
  std::vector<float> ck(kKeyChunk * group * hd);  // [chunk, G·hd]: Σ'_g k_j
  for (int64_t j0 = 0; j0 < n; j0 += kKeyChunk) {
    const int64_t m = std::min(kKeyChunk, n - j0);
    kernels::MatMul(ck.data(), keys + j0 * hd, covs, m, pool);
    for (int64_t j = 0; j < m; ++j) {
      const float* k = keys + (j0 + j) * hd;
      for (int32_t g = 0; g < group; ++g) {
        const float* mu = stats.mu.data() + (kv * group + g) * hd;
        const float* sk = ck.data() + (j * group + g) * hd;
        float lin = 0.0f, quad = 0.0f;
        for (int64_t c = 0; c < hd; ++c) {
          lin += mu[c] * k[c];
          quad += k[c] * sk[c];
        }
        z[g * n + j0 + j] = lin / sqrt_d + quad / static_cast<float>(hd) / 2.0f;
      }
    }
  }
}

void SoftmaxInPlace(float* x, int64_t n) {
  const float mx = MaxOf(x, n);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - mx);
    sum += x[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

class ExpectedAttentionScorer final : public Scorer {
 public:
  std::string_view name() const override { return "expected_attention"; }
  uint32_t needs() const override { return kKeys | kValues | kPreRopeQueries; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    const int64_t T = view.n_tokens, hd = view.head_dim, n = T - kSinks;
    if (n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected_attention: needs more than ", kSinks, " tokens, got T=", T));
    }
    const int32_t Hkv = view.n_kv_heads, group = view.n_heads / Hkv;
    const QueryStats stats = RotatedQueryStats(view);
    std::vector<float> z(group * n);
    for (int32_t kv = 0; kv < Hkv; ++kv) {
      GroupLogits(view, stats, kv, z.data());
      for (int32_t g = 0; g < group; ++g) SoftmaxInPlace(z.data() + g * n, n);
      MeanOverGroup(scores + kv * T + kSinks, z.data(), group, 1, n);
      for (int64_t j = 0; j < n; ++j) {
        const float* v = view.values + (kv * T + kSinks + j) * hd;
        double norm = 0.0;
        for (int64_t c = 0; c < hd; ++c) norm += static_cast<double>(v[c]) * v[c];
        scores[kv * T + kSinks + j] *= static_cast<float>(std::sqrt(norm));
      }
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t kv = 0; kv < Hkv; ++kv) mx = std::max(mx, MaxOf(scores + kv * T + kSinks, n));
    for (int32_t kv = 0; kv < Hkv; ++kv) std::fill_n(scores + kv * T, kSinks, mx + 1.0f);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Scorer> NewExpectedAttentionScorer() {
  return std::make_unique<ExpectedAttentionScorer>();
}

}  // namespace glimpse::eviction

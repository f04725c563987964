#include "core/eviction/selection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::eviction {
namespace {

// Row r = layer · Hkv + kv_head; kept[r][t] = 1 once entry t of row r is kept.
using Masks = std::vector<std::vector<uint8_t>>;

struct Problem {
  const std::vector<std::vector<float>>* scores;  // [L][Hkv · T]
  int64_t n_tokens;                               // T
  int32_t n_kv_heads;                             // Hkv
  int64_t n_layers;                               // L
  int64_t sinks;                                  // forced prefix length, ≤ T
  int64_t window;                                 // forced suffix length, ≤ T
  int64_t forced;                                 // |prefix ∪ suffix| = min(T, sinks + window)
};

// One selectable entry. 12 bytes so that a global top-k over L·Hkv·T entries stays compact.
struct Candidate {
  float score;
  int32_t row;
  int32_t index;
};

// Strict total order: higher score first, then lower row (layer-major, then head), then lower
// index. This is the "ties → lower index first" rule over the flattened [L, Hkv, T] index.
bool Better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.row != b.row) return a.row < b.row;
  return a.index < b.index;
}

absl::Status ValidateShapes(const std::vector<std::vector<float>>& scores, int64_t n_tokens,
                            int32_t n_kv_heads) {
  if (scores.empty()) return absl::InvalidArgumentError("Select: scores has no layers");
  if (n_tokens < 1 || n_tokens > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: n_tokens=", n_tokens, " must be in [1, 2^31 - 1]"));
  }
  if (n_kv_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: n_kv_heads=", n_kv_heads, " must be >= 1"));
  }
  const int64_t row_size = static_cast<int64_t>(n_kv_heads) * n_tokens;
  if (static_cast<int64_t>(scores.size()) * row_size > std::numeric_limits<int32_t>::max()) {
    // Rows are numbered with int32_t; L·Hkv·T beyond that is far past any real cache.
    return absl::InvalidArgumentError(absl::StrCat("Select: L·Hkv·T=", scores.size(), "·",
                                                   n_kv_heads, "·", n_tokens, " is too large"));
  }
  for (size_t layer = 0; layer < scores.size(); ++layer) {
    const auto& s = scores[layer];
    if (static_cast<int64_t>(s.size()) != row_size) {
      return absl::InvalidArgumentError(absl::StrCat("Select: scores[", layer, "] has ", s.size(),
                                                     " values, expected Hkv·T = ", n_kv_heads, "·",
                                                     n_tokens, " = ", row_size));
    }
    for (size_t i = 0; i < s.size(); ++i) {
      if (!std::isfinite(s[i])) {
        return absl::InvalidArgumentError(absl::StrCat("Select: scores[", layer, "] head ",
                                                       i / n_tokens, " entry ", i % n_tokens,
                                                       " is ", s[i], " (scores must be finite)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const SelectionOptions& o, int64_t n_layers,
                             const std::vector<double>& layer_preference) {
  if (o.sinks < 0 || o.window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: sinks=", o.sinks, " and window=", o.window, " must be >= 0"));
  }
  if (!(o.safeguard >= 0.0 && o.safeguard <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: safeguard=", o.safeguard, " must be in [0, 1]"));
  }
  if (o.schedule == Schedule::kPyramid &&
      !(o.pyramid_beta >= 1.0 && std::isfinite(o.pyramid_beta))) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: pyramid_beta=", o.pyramid_beta, " must be finite and >= 1"));
  }
  if (o.schedule != Schedule::kCake) return absl::OkStatus();
  if (static_cast<int64_t>(layer_preference.size()) != n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: CAKE needs one layer_preference per layer: got ",
                     layer_preference.size(), " for L=", n_layers));
  }
  for (size_t l = 0; l < layer_preference.size(); ++l) {
    if (!(layer_preference[l] > 0.0 && std::isfinite(layer_preference[l]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Select: layer_preference[", l, "]=", layer_preference[l], " must be finite and > 0"));
    }
  }
  return absl::OkStatus();
}

// Per-head budget C. Ratio: C = max(1, llround(ratio·T)) — nearest integer, halves away from zero,
// computed in double. Tokens: C = budget_tokens (values above T are allowed and keep everything).
absl::StatusOr<int64_t> ResolveBudget(const SelectionOptions& o, int64_t n_tokens) {
  const bool has_ratio = o.budget_ratio != 0.0;
  const bool has_tokens = o.budget_tokens != 0;
  if (has_ratio == has_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: set exactly one of budget_ratio and budget_tokens (got budget_ratio=",
                     o.budget_ratio, ", budget_tokens=", o.budget_tokens, ")"));
  }
  if (has_tokens) {
    if (o.budget_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Select: budget_tokens=", o.budget_tokens, " must be >= 1"));
    }
    return o.budget_tokens;
  }
  if (!(o.budget_ratio > 0.0 && o.budget_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: budget_ratio=", o.budget_ratio, " must be in (0, 1]"));
  }
  return std::max<int64_t>(1, std::llround(o.budget_ratio * static_cast<double>(n_tokens)));
}

// Clamps every budget to [lo, hi], then moves single tokens until the sum is `target`: surplus is
// taken from the largest budget (ties: the last such layer), shortfall given to the smallest
// (ties: the first such layer). A non-increasing sequence stays non-increasing.
// Requires L·lo <= target <= L·hi.
void LevelToSum(std::vector<int64_t>& b, int64_t target, int64_t lo, int64_t hi) {
  for (int64_t& v : b) v = std::clamp(v, lo, hi);
  int64_t sum = std::accumulate(b.begin(), b.end(), int64_t{0});
  for (; sum > target; --sum) {
    size_t best = 0;
    for (size_t l = 1; l < b.size(); ++l) {
      if (b[l] >= b[best]) best = l;
    }
    --b[best];
  }
  for (; sum < target; ++sum) {
    size_t best = 0;
    for (size_t l = 1; l < b.size(); ++l) {
      if (b[l] < b[best]) best = l;
    }
    ++b[best];
  }
}

// PyramidKV exactly as NVIDIA kvpress 0.5.5 (presses/pyramidkv_press.py, get_layer_budget), with
// the same double operations in the same order so that every round() lands where Python's does.
// x is the real budget (T·budget_ratio unrounded, or budget_tokens), `uniform` kvpress's fallback
// (round(T·budget_ratio) or budget_tokens), W the window:
//   cap = W + x;  min = (cap − W)/β;  max = 2(cap − W) − min;
//   if max >= T − W: max = T − W, min = 2(cap − W) − max;
//   if not (T >= max >= min >= W): every layer keeps `uniform`;
//   else B_l = round(max − l·(max − min)/(L − 1)), round = halves to even (std::nearbyint).
// The condition bounds B_l to [W, T]; only the forced floor F (> W when sinks > 0) is added.
// L = 1 keeps `uniform` (kvpress would divide by zero).
std::vector<int64_t> PyramidBudgets(const Problem& p, double x, int64_t uniform, double beta) {
  const int64_t layers = p.n_layers;
  const auto w = static_cast<double>(p.window), t = static_cast<double>(p.n_tokens);
  const double cap = w + x;
  double min_num = (cap - w) / beta;
  double max_num = (cap - w) * 2 - min_num;
  if (max_num >= t - w) {
    max_num = t - w;
    min_num = (cap - w) * 2 - max_num;
  }
  std::vector<int64_t> b(layers, std::max(uniform, p.forced));
  if (layers == 1 || !(t >= max_num && max_num >= min_num && min_num >= w)) return b;
  const double steps = (max_num - min_num) / static_cast<double>(layers - 1);
  for (int64_t l = 0; l < layers; ++l) {
    const auto rounded =
        static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(l) * steps));
    b[l] = std::max(rounded, p.forced);
  }
  return b;
}

// CAKE: B_l = C·L·P_l/ΣP, clamped to [forced, T] with the clamped surplus or deficit redistributed
// proportionally over the other layers (exact active-set water-filling: of the layers above T and
// those below `forced`, the side with the larger total violation is fixed at its bound, and the
// rest is re-shared, until no share violates). Rounding: floor every share, then hand the
// C·L − Σ⌊share⌋ remaining tokens one each to the layers with the largest fractional parts (ties:
// lower layer first). LevelToSum only guards against floating-point drift.
std::vector<int64_t> CakeBudgets(const Problem& p, int64_t c, const std::vector<double>& pref) {
  const int64_t layers = p.n_layers, target = c * layers;
  const double lo = static_cast<double>(p.forced), hi = static_cast<double>(p.n_tokens);
  std::vector<double> share(layers, 0.0);
  std::vector<bool> fixed(layers, false);
  for (;;) {
    double rest = static_cast<double>(target), weight = 0.0;
    for (int64_t l = 0; l < layers; ++l) {
      if (fixed[l]) {
        rest -= share[l];
      } else {
        weight += pref[l];
      }
    }
    double excess = 0.0, deficit = 0.0;
    for (int64_t l = 0; l < layers; ++l) {
      if (fixed[l]) continue;
      share[l] = rest * pref[l] / weight;
      excess += std::max(0.0, share[l] - hi);
      deficit += std::max(0.0, lo - share[l]);
    }
    if (excess == 0.0 && deficit == 0.0) break;
    const bool fix_high = excess >= deficit;
    for (int64_t l = 0; l < layers; ++l) {
      if (fixed[l] || (fix_high ? share[l] <= hi : share[l] >= lo)) continue;
      share[l] = fix_high ? hi : lo;
      fixed[l] = true;
    }
  }
  std::vector<int64_t> b(layers);
  for (int64_t l = 0; l < layers; ++l) {
    b[l] = std::clamp(static_cast<int64_t>(std::floor(share[l])), p.forced, p.n_tokens);
  }
  std::vector<int64_t> order(layers);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return share[x] - std::floor(share[x]) > share[y] - std::floor(share[y]);
  });
  int64_t left = target - std::accumulate(b.begin(), b.end(), int64_t{0});
  for (int64_t l : order) {
    if (left <= 0) break;
    if (b[l] < p.n_tokens) ++b[l], --left;
  }
  LevelToSum(b, target, p.forced, p.n_tokens);
  return b;
}

float Score(const Problem& p, int64_t row, int64_t index) {
  return (*p.scores)[row / p.n_kv_heads][(row % p.n_kv_heads) * p.n_tokens + index];
}

void MarkForced(const Problem& p, std::vector<uint8_t>& kept) {
  for (int64_t t = 0; t < p.sinks; ++t) kept[t] = 1;
  for (int64_t t = p.n_tokens - p.window; t < p.n_tokens; ++t) kept[t] = 1;
}

// Keeps the `k` best not-yet-kept entries (by Better) of rows [row_begin, row_end).
void KeepTop(const Problem& p, int64_t row_begin, int64_t row_end, int64_t k, Masks& kept) {
  if (k <= 0) return;
  std::vector<Candidate> pool;
  for (int64_t row = row_begin; row < row_end; ++row) {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      if (!kept[row][t]) {
        pool.push_back({Score(p, row, t), static_cast<int32_t>(row), static_cast<int32_t>(t)});
      }
    }
  }
  if (k < static_cast<int64_t>(pool.size())) {
    std::nth_element(pool.begin(), pool.begin() + k, pool.end(), Better);
    pool.resize(k);
  }
  for (const Candidate& c : pool) kept[c.row][c.index] = 1;
}

// Every row keeps its forced entries plus its `guard` best others; then one top-k per group of
// rows (a row, a layer or everything) fills the rest of the group's budget.
Masks Choose(const Problem& p, const std::vector<int64_t>& budgets, Granularity granularity,
             double safeguard) {
  const int64_t heads = p.n_kv_heads, rows = p.n_layers * heads;
  Masks kept(rows, std::vector<uint8_t>(p.n_tokens, 0));
  int64_t global_rest = 0;
  for (int64_t layer = 0; layer < p.n_layers; ++layer) {
    const int64_t b = budgets[layer];
    // Safeguard (kvpress adakv_press.py): n_safe = ⌊α·B_l⌋ of each head's own top scores, forced
    // entries counting first (they score +∞), so each head is guaranteed max(forced, n_safe).
    int64_t guard = b - p.forced;
    if (granularity != Granularity::kPerHead) {
      const auto n_safe = static_cast<int64_t>(std::floor(safeguard * static_cast<double>(b)));
      guard = std::max<int64_t>(0, n_safe - p.forced);
    }
    for (int64_t row = layer * heads; row < (layer + 1) * heads; ++row) {
      MarkForced(p, kept[row]);
      KeepTop(p, row, row + 1, guard, kept);
    }
    const int64_t rest = heads * (b - p.forced - guard);
    if (granularity == Granularity::kPerLayer)
      KeepTop(p, layer * heads, (layer + 1) * heads, rest, kept);
    global_rest += rest;
  }
  if (granularity == Granularity::kGlobal) KeepTop(p, 0, rows, global_rest, kept);
  return kept;
}

KeptEntries ToIndices(const Problem& p, const Masks& kept) {
  KeptEntries out(p.n_layers, std::vector<std::vector<int64_t>>(p.n_kv_heads));
  for (size_t row = 0; row < kept.size(); ++row) {
    auto& indices = out[row / p.n_kv_heads][row % p.n_kv_heads];
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      if (kept[row][t]) indices.push_back(t);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<KeptEntries> Select(const std::vector<std::vector<float>>& scores, int64_t n_tokens,
                                   int32_t n_kv_heads, const SelectionOptions& options,
                                   const std::vector<double>& layer_preference) {
  RETURN_IF_ERROR(ValidateShapes(scores, n_tokens, n_kv_heads));
  const auto n_layers = static_cast<int64_t>(scores.size());
  RETURN_IF_ERROR(ValidateOptions(options, n_layers, layer_preference));
  ASSIGN_OR_RETURN(const int64_t c, ResolveBudget(options, n_tokens));
  const Problem p{&scores,
                  n_tokens,
                  n_kv_heads,
                  n_layers,
                  std::min(options.sinks, n_tokens),
                  std::min(options.window, n_tokens),
                  std::min(n_tokens, options.sinks + options.window)};
  if (c < p.forced) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: budget per head C=", c, " (budget_ratio=", options.budget_ratio,
                     ", budget_tokens=", options.budget_tokens, ", T=", n_tokens,
                     ") is smaller than the forced entries: sinks=", options.sinks,
                     " + window=", options.window, " -> ", p.forced));
  }
  std::vector<int64_t> budgets(n_layers, std::min(c, n_tokens));
  if (c < n_tokens && options.schedule == Schedule::kPyramid) {
    // kvpress spreads the unrounded T·(1 − ratio) and falls back to its round() (halves to even).
    const bool ratio = options.budget_ratio != 0.0;
    const double x =
        ratio ? options.budget_ratio * static_cast<double>(n_tokens) : static_cast<double>(c);
    const int64_t uniform = ratio ? static_cast<int64_t>(std::nearbyint(x)) : c;
    budgets = PyramidBudgets(p, x, uniform, options.pyramid_beta);
  } else if (c < n_tokens && options.schedule == Schedule::kCake) {
    budgets = CakeBudgets(p, c, layer_preference);
  }
  for (int64_t l = 0; l < n_layers; ++l) {
    if (budgets[l] < p.forced || budgets[l] > n_tokens) {
      return absl::InternalError(absl::StrCat("Select: layer ", l, " budget ", budgets[l],
                                              " outside [forced=", p.forced, ", T=", n_tokens,
                                              "]"));
    }
  }
  return ToIndices(p, Choose(p, budgets, options.granularity, options.safeguard));
}

}  // namespace glimpse::eviction

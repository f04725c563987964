// Budgeted selection of KV entries from scores, shared by every scorer.
//
// Given scores [Hkv, T] for each of L layers, picks which entries each (layer, kv-head) keeps:
// the first `sinks` and the last `window` entries are always kept; the rest of each budget goes to
// the highest scores (ties: lower index first, so selection is deterministic). The budget counts
// every kept entry, sinks and window included: Σ over (layer, head) of kept entries ==
// Hkv · Σ_l B_l for the schedule's layer budgets B_l below, and never more than T per head. For
// kUniform and kCake Σ_l B_l == C·L exactly; for kPyramid it is whatever kvpress's per-layer
// rounding gives (within L/2 of T·budget_ratio·L or budget_tokens·L, see below).
//
// Budget and forced entries (all integer rules):
//   C = budget_tokens, or max(1, llround(budget_ratio · T)) (nearest, halves away from zero, in
//   double). C >= T keeps every entry (any schedule, any granularity). The forced entries are
//   [0, sinks) ∪ [T − window, T), counted once where they overlap: F = min(T, sinks + window).
//   C < F is InvalidArgument. Forced entries rank above every score (as if +∞); their own scores
//   are ignored but must still be finite.
// Order: higher score first; equal scores → lower flattened index (layer, then kv-head, then entry
//   index), i.e. lower entry index within a head, lower head within a layer, lower layer globally.
//
// Granularity:
//   kPerHead   every (layer, head) keeps its layer's budget (uniform across heads).
//   kPerLayer  AdaKV: one top-k across the heads of a layer for layer_budget · Hkv entries, each
//              head first guaranteed safeguard · layer_budget of its own best (kvpress
//              adakv_press.py, α = 0.2).
//   kGlobal    one top-k across all layers and heads with the same per-head safeguard.
//   Safeguard: n_safe = ⌊α · B_l⌋ (kvpress's int() truncation) of a head's own top entries, forced
//   ones first, so each head keeps at least max(F, n_safe). In kGlobal the schedule only sets these
//   per-layer safeguards; the single top-k takes Hkv·Σ_l B_l − Σ guaranteed over all rows, so
//   layers' totals follow the scores. (kvpress derives n_kept = int(T·(1 − ratio)) by truncation;
//   here the budget is C as above.)
// Schedule (per-layer budgets B_l before granularity applies; each B_l in [F, T]):
//   kUniform   every layer the same C.
//   kPyramid   PyramidKV exactly as NVIDIA kvpress 0.5.5 computes it (kvpress/presses/
//              pyramidkv_press.py, PyramidKVPress.get_layer_budget), in double, same operations in
//              the same order. With W the window and x the real budget (x = T·budget_ratio
//              unrounded, kvpress's q_len·(1 − compression_ratio); or x = budget_tokens):
//                cap = W + x;  min = (cap − W)/β;  max = 2(cap − W) − min;
//                if max >= T − W:  max = T − W,  min = 2(cap − W) − max;
//                if not (T >= max >= min >= W):  B_l = U for every layer (kvpress's "fall back to
//                  SnapKV"; U = round(T·budget_ratio), or budget_tokens);
//                else  B_l = round(max − l·(max − min)/(L − 1)).
//              round() is Python's: halves to even. The condition already puts B_l in [W, T];
//              the one extra rule is B_l = max(B_l, F), which matters only when sinks > 0 (or U
//              rounds a half down below C = F). L = 1 (kvpress divides by zero) keeps U. Budgets
//              never increase with the layer. Σ_l B_l is not corrected to C·L, as in kvpress: in
//              both branches max + min = 2x, so the unrounded line sums to x·L exactly and each
//              round() moves it by at most 1/2, i.e. |Σ_l B_l − x·L| <= L/2 (before the F rule).
//              Requires β >= 1.
//   kCake      CAKE: B_l ∝ layer_preference[l] (the scorer supplies P_l = H_l^{1/τ1}·V_l^{1/τ2}).
//              Real shares C·L·P_l/ΣP; shares outside [F, T] are fixed at the bound and the rest
//              re-shared in proportion (water-filling); then ⌊share⌋ plus one token each to the
//              largest fractional parts (ties: lower layer) until the sum is exactly C·L.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::eviction {

enum class Granularity { kPerHead, kPerLayer, kGlobal };
enum class Schedule { kUniform, kPyramid, kCake };

struct SelectionOptions {
  // Exactly one of the two (the other left 0): a fraction of T in (0, 1], or a token count per head
  // >= 1 (counts >= T keep everything).
  double budget_ratio = 0.0;
  int64_t budget_tokens = 0;
  int64_t sinks = 4;
  int64_t window = 32;
  Granularity granularity = Granularity::kPerHead;
  Schedule schedule = Schedule::kUniform;
  double pyramid_beta = 20.0;
  double safeguard = 0.2;  // α in [0, 1]; kPerLayer and kGlobal only
};

// kept[layer][kv_head] = strictly increasing entry indices in [0, T).
using KeptEntries = std::vector<std::vector<std::vector<int64_t>>>;

// scores[layer] is [Hkv, T] (row-major), L = scores.size() >= 1, 1 <= T and L·Hkv·T < 2^31.
// layer_preference is required for kCake (size L, finite, > 0) and ignored otherwise.
// InvalidArgument, naming the value, for: no or two budgets, a ratio outside (0, 1], a budget
// smaller than F = min(T, sinks + window) (per head; the schedules then keep every layer >= F),
// mismatched sizes, non-finite scores, negative sinks/window, α outside [0, 1], β < 1 for kPyramid.
absl::StatusOr<KeptEntries> Select(const std::vector<std::vector<float>>& scores, int64_t n_tokens,
                                   int32_t n_kv_heads, const SelectionOptions& options,
                                   const std::vector<double>& layer_preference = {});

}  // namespace glimpse::eviction

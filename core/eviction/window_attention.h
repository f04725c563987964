// Shared arithmetic of the attention-based scorers: the attention of the last W prompt queries
// over all T keys, GQA reductions, 1-D pooling along keys and input validation.
//
// WindowAttention computes, for one query head h, probs[i, j] = softmax_j(q_i·k_j / √hd) for the
// W window queries i (query i is prompt token T − W + i) over all T keys, causal inside the window
// (key j > T − W + i gets probability 0), in fp32 — the attention kvpress's SnapKVPress
// .compute_window_attention takes (softmax over all keys, fp32). It costs O(W·T·hd) per head and
// O(W·T) memory; it never forms the T×T matrix. All functions are thread-compatible and keep no
// pointers to their arguments.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/eviction/scorer.h"

namespace glimpse::eviction {

// OK when `view` has sane dimensions (H, Hkv, hd, T > 0, H a multiple of Hkv), `scores` is set and
// every input named in `needs` is present (rope_inv_freq too when kPreRopeQueries is needed);
// else InvalidArgument naming `scorer` and the missing input.
absl::Status ValidateView(const LayerView& view, uint32_t needs, std::string_view scorer,
                          const float* scores);

// OK when the view holds at least `window` window queries and T >= window; else InvalidArgument.
absl::Status ValidateWindow(const LayerView& view, int64_t window, std::string_view scorer);

// probs: [window, T]. Reads the last `window` rows of view.window_queries for query head `head`
// and the keys of its kv-head (head / group). Requires ValidateView(kKeys | kWindowQueries) and
// ValidateWindow(window) to have passed.
// NOTE: a query row whose first element is NaN is absent: its probs row is all zeros. The pipeline
// marks so the rows it has no query for, when a turn over a session's history has fewer new tokens
// than W (pipeline.h); scorers then average over W rows of which only the present ones carry mass
// (SnapKV's means scale by present / W, which keeps their order).
void WindowAttention(const LayerView& view, int64_t window, int32_t head, float* probs);

// mean[j] = (1 / window) Σ_i probs[i, j] for j < n: the window's mean attention to the first n
// keys; probs: [window, T] as WindowAttention writes it, n <= T.
void WindowMean(const float* probs, int64_t window, int64_t T, int64_t n, float* mean);

// out[kv, n] = mean over the group's query heads of x[h, n]; x: [H, n], out: [Hkv, n].
void MeanOverGroup(float* out, const float* x, int32_t n_heads, int32_t n_kv_heads, int64_t n);

// out[n] = pooled x[n] (see Pooling in scorer.h); kernel odd and >= 1. `out` must not alias `x`.
void Pool1d(float* out, const float* x, int64_t n, int64_t kernel, Pooling pooling);

// max over x[n] (−inf for n == 0).
float MaxOf(const float* x, int64_t n);

}  // namespace glimpse::eviction

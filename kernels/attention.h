// Attention over a ragged KV cache: each (layer, kv-head) keeps its own set of entries, each with
// the original position of its token, so eviction may drop any entries of any head.
//
// A query at position p attends to every entry whose position is <= p (causal by position, not by
// index: entries need not be contiguous or sorted). Keys are stored post-RoPE.
#pragma once

#include <cstdint>

namespace glimpse::kernels {

// One kv-head and the `n_q` query rows that read it (the GQA group's heads × tokens).
//   out:   [n_q, head_dim]
//   q:     [n_q, head_dim]          (post-RoPE)
//   q_pos: [n_q]                     position of each query row
//   k, v:  [n_kv, head_dim]
//   kv_pos:[n_kv]
// out[i] = Σ_j softmax_j(q_i·k_j·scale | kv_pos[j] <= q_pos[i]) · v_j. A row with no visible entry
// gets zeros. `scratch` holds at least n_kv floats.
void AttendRagged(float* out, const float* q, const int32_t* q_pos, const float* k, const float* v,
                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q, int64_t n_kv,
                  int64_t head_dim);

}  // namespace glimpse::kernels

// Attention statistics for eviction scorers: how much softmax attention each KV entry receives
// from a set of query rows, without materialising the [n_q, n_kv] probability matrix beyond a
// block of rows at a time (H2O's accumulated attention, FMInference/H2O modify_llama.py:
// a_j = Σ_i softmax_j(q_i·k_j·scale), causal).
//
// Same visibility rule as AttendRagged (kernels/attention.h): a query at position p sees every
// entry whose position is <= p, whatever the order of the entries. Keys are post-RoPE.
#pragma once

#include <cstdint>

namespace glimpse::kernels {

// One kv-head and `n_q` query rows that read it.
//   acc:    [n_kv]            accumulated into (+=), not cleared
//   q:      [n_q, head_dim]   post-RoPE
//   q_pos:  [n_q]
//   k:      [n_kv, head_dim]
//   kv_pos: [n_kv]
// acc[j] += Σ_i softmax_j(q_i·k_j·scale | kv_pos[j] <= q_pos[i]). A row with no visible entry adds
// nothing. Thread-compatible: calls on distinct `acc` may run concurrently.
void AccumulateAttention(float* acc, const float* q, const int32_t* q_pos, const float* k,
                         const int32_t* kv_pos, float scale, int64_t n_q, int64_t n_kv,
                         int64_t head_dim);

// The scalar reference (two passes per row, std::exp) the fast path is tested against.
// `scratch` holds at least n_kv floats.
void AccumulateAttentionReference(float* acc, const float* q, const int32_t* q_pos, const float* k,
                                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q,
                                  int64_t n_kv, int64_t head_dim);

}  // namespace glimpse::kernels

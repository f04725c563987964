// The eviction scorers' statistic on the device (kernels/attention_stats.h's AccumulateAttention):
// how much softmax attention each key receives from a range of query rows (SnapKV's observation
// window, LookaheadKV's lookahead tokens), read after AttendPrefill from the rows' log-sum-exp, so
// neither pass holds more than a tile of the [rows, keys] probabilities.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace glimpse::kernels::cuda {

// acc[g, j] += Σ_{h in kv-head g's group} Σ_{i in [row_begin, row_end)}
//                exp(q[i, h]·k[j, g]·scale − lse[h, i])   over the j with kv_pos[j] <= q_pos[i];
// rows whose lse is −inf add nothing. With AttendPrefill's lse this is kernels::
// AccumulateAttention over the group's query rows. Layouts are AttendPrefill's:
//   acc:  [n_kv_heads, n_kv] fp32 (accumulated into, not cleared)
//   q:    [n_q, n_heads, head_dim] fp16;  lse: [n_heads, n_q];  q_pos: [n_q]
//   k:    n_kv entries of n_kv_heads heads, fp16, laid out as `kv` says;  kv_pos: [n_kv]
// head_dim is 64 or 128. Returns the launch's error.
cudaError_t AccumulateAttention(float* acc, const void* q, const float* lse, const int32_t* q_pos,
                                int64_t row_begin, int64_t row_end, const void* k, KvStrides kv,
                                const int32_t* kv_pos, float scale, int64_t n_q, int64_t n_kv,
                                int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                cudaStream_t stream);

}  // namespace glimpse::kernels::cuda

// AttendPagedBatch: one block per (query, split of kPagesPerSplit pages) writes the split's
// partial (max, sum and weighted values per query row); a second kernel merges the splits
// (flash-decoding), so a long cache fills the device even for one sequence.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_util.cuh"

namespace glimpse::kernels::cuda {
namespace {

using internal::Bf16Bits;
using internal::E4m3Bits;
using internal::HalfBits;
using internal::WarpMax;
using internal::WarpSum;

constexpr int kPagesPerSplit = 4;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKiviGroup = 32;  // rows per key group, channels per value group (kvpage/codec.h)
constexpr int kMaxHeadDim = 256;
constexpr int kChunk = kThreads;  // rows scored per pass, one per thread

// Floats of one split's partial for one query row: max, sum, then head_dim weighted values.
__host__ __device__ inline int64_t PartialFloats(int64_t head_dim) { return head_dim + 2; }

// Element `c` of row `r` of a KIVI section (kernels/cpu's KiviRowRef): keys are scaled per
// channel over groups of 32 rows, values per row over groups of 32 channels.
__device__ float KiviElement(const void* section, bool keys, int bits, int64_t rows, int64_t r,
                             int64_t c, int64_t head_dim) {
  const int64_t groups = (head_dim + kKiviGroup - 1) / kKiviGroup;
  const int64_t params = keys ? (rows + kKiviGroup - 1) / kKiviGroup * head_dim : rows * groups;
  const auto* half = static_cast<const uint16_t*>(section);
  const auto* codes = reinterpret_cast<const uint8_t*>(half + 2 * params);
  const int64_t row_bytes = (head_dim * bits + 7) / 8;
  const int64_t p = keys ? r / kKiviGroup * head_dim + c : r * groups + c / kKiviGroup;
  const int code = (codes[r * row_bytes + c * bits / 8] >> ((c * bits) % 8)) & ((1 << bits) - 1);
  return fmaf(static_cast<float>(code), HalfBits(half[p]), HalfBits(half[params + p]));
}

// Element `c` of row `r` of a page's keys (`keys`) or values, in fp32.
__device__ float PageElement(const KvPageView& p, bool keys, int64_t r, int64_t c,
                             int64_t head_dim) {
  const void* data = keys ? p.k : p.v;
  const int64_t at = r * head_dim + c;
  switch (p.dtype) {
    case KvDType::kF32:
      return static_cast<const float*>(data)[at];
    case KvDType::kF16:
      return HalfBits(static_cast<const uint16_t*>(data)[at]);
    case KvDType::kBF16:
      return Bf16Bits(static_cast<const uint16_t*>(data)[at]);
    case KvDType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(data)[at]) *
             (keys ? p.k_scale : p.v_scale)[r];
    case KvDType::kE4M3:
      return E4m3Bits(static_cast<const uint8_t*>(data)[at]) * (keys ? p.k_scale : p.v_scale)[r];
    case KvDType::kKivi4:
      return KiviElement(data, keys, 4, p.rows, r, c, head_dim);
    case KvDType::kKivi2:
      return KiviElement(data, keys, 2, p.rows, r, c, head_dim);
  }
  return 0.0f;
}

// Elements [c, c + 8) of row r of a page's keys or values in fp32; c a multiple of 8 and rows
// 16-byte aligned (head_dim a multiple of 8), so row formats read one vector.
__device__ void Load8(float* x, const KvPageView& p, bool keys, int64_t r, int64_t c,
                      int64_t head_dim) {
  const void* data = keys ? p.k : p.v;
  const int64_t at = r * head_dim + c;
  switch (p.dtype) {
    case KvDType::kF32: {
      const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(data) + at);
      const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(data) + at + 4);
      x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z,
      x[7] = b.w;
      return;
    }
    case KvDType::kF16:
    case KvDType::kBF16: {
      const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(data) + at);
      const auto* h = reinterpret_cast<const uint16_t*>(&u);
      for (int e = 0; e < 8; ++e) x[e] = p.dtype == KvDType::kF16 ? HalfBits(h[e]) : Bf16Bits(h[e]);
      return;
    }
    case KvDType::kI8:
    case KvDType::kE4M3: {
      const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(data) + at);
      const auto* b = reinterpret_cast<const uint8_t*>(&u);
      const float scale = (keys ? p.k_scale : p.v_scale)[r];
      for (int e = 0; e < 8; ++e) {
        x[e] = (p.dtype == KvDType::kI8 ? static_cast<float>(static_cast<int8_t>(b[e]))
                                        : E4m3Bits(b[e])) *
               scale;
      }
      return;
    }
    default:
      for (int e = 0; e < 8; ++e) x[e] = PageElement(p, keys, r, c + e, head_dim);
  }
}

// One block per (query, split). The split's rows go in chunks of kChunk: each thread scores one
// row against every query row (its key decoded once, 8 elements at a time), warps turn a chunk's
// scores into probabilities under a running max and sum per query row, then each thread
// accumulates its channels of the chunk's values (consecutive threads, consecutive channels).
__global__ void __launch_bounds__(kThreads, 3)
    SplitKernel(const PagedQuery* queries, const KvPageView* pages, float scale, int64_t D,
                int n_splits, float* partials) {
  __shared__ float qs[kMaxPagedRows][kMaxHeadDim];
  __shared__ float probs[kMaxPagedRows][kChunk];
  __shared__ float merge[kThreads * 8];
  __shared__ float m_s[kMaxPagedRows], l_s[kMaxPagedRows], alpha_s[kMaxPagedRows];
  __shared__ int32_t qpos_s[kMaxPagedRows];
  const PagedQuery query = queries[blockIdx.x];
  const int n_q = query.n_q, t = threadIdx.x, warp = t / 32, lane = t % 32;
  for (int i = t; i < kMaxPagedRows * D; i += kThreads) {
    const int row = static_cast<int>(i / D);
    qs[row][i % D] = row < n_q ? query.q[i] * scale : 0.0f;
  }
  if (t < kMaxPagedRows) {
    m_s[t] = -INFINITY;
    l_s[t] = 0.0f;
    qpos_s[t] = t < n_q ? query.q_pos[t] : 0;
  }
  // Values: D / 8 threads per row, 8 channels each (one vector load); the block's threads form
  // `groups` such row teams, team g taking the chunk rows ≡ g (mod groups).
  const int per_row = static_cast<int>(D / 8), groups = kThreads / per_row;
  const int group = t / per_row, c0 = (t % per_row) * 8;
  const bool values = group < groups;  // the threads beyond the last whole team idle
  float acc[kMaxPagedRows][8] = {};
  __syncthreads();

  const int32_t first = query.page_begin + static_cast<int32_t>(blockIdx.y) * kPagesPerSplit;
  const int32_t last = min(query.page_end, first + kPagesPerSplit);
  for (int32_t pi = first; pi < last; ++pi) {
    const KvPageView page = pages[pi];
    for (int64_t r0 = 0; r0 < page.rows; r0 += kChunk) {
      const int rows = static_cast<int>(min(static_cast<int64_t>(kChunk), page.rows - r0));
      if (t < rows) {
        const int64_t r = r0 + t;
        float dots[kMaxPagedRows] = {};
        for (int64_t c = 0; c < D; c += 8) {
          float x[8];
          if (D % 8 == 0) {
            Load8(x, page, true, r, c, D);
          } else {
            for (int e = 0; e < 8; ++e) x[e] = c + e < D ? PageElement(page, true, r, c + e, D) : 0;
          }
#pragma unroll
          for (int i = 0; i < kMaxPagedRows; ++i) {
            if (i >= n_q) break;
            for (int e = 0; e < 8 && c + e < D; ++e) dots[i] += qs[i][c + e] * x[e];
          }
        }
        const int32_t pos = page.pos[r];
#pragma unroll
        for (int i = 0; i < kMaxPagedRows; ++i) {
          if (i < n_q) probs[i][t] = pos <= qpos_s[i] ? dots[i] : -INFINITY;
        }
      }
      __syncthreads();
      for (int i = warp; i < n_q; i += kWarps) {
        float mx = -INFINITY;
        for (int j = lane; j < rows; j += 32) mx = fmaxf(mx, probs[i][j]);
        const float m_old = m_s[i], m_new = fmaxf(m_old, WarpMax(mx));
        const bool none = m_new == -INFINITY;
        float sum = 0.0f;
        for (int j = lane; j < rows; j += 32) {
          const float p = none ? 0.0f : __expf(probs[i][j] - m_new);
          probs[i][j] = p;
          sum += p;
        }
        sum = WarpSum(sum);
        if (lane == 0) {
          const float alpha = none ? 1.0f : __expf(m_old - m_new);
          alpha_s[i] = alpha;
          m_s[i] = m_new;
          l_s[i] = l_s[i] * alpha + sum;
        }
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kMaxPagedRows; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] *= i < n_q ? alpha_s[i] : 1.0f;
      }
      for (int j = group; values && j < rows; j += groups) {
        float x[8];
        Load8(x, page, false, r0 + j, c0, D);
#pragma unroll
        for (int i = 0; i < kMaxPagedRows; ++i) {
          if (i >= n_q) break;
          const float p = probs[i][j];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[i][e] += p * x[e];
        }
      }
      __syncthreads();  // probs is rewritten by the next chunk
    }
  }

  // The teams' sums, then the split's partial: max, sum, weighted values per query row. Team g's
  // channels c0..c0+7 sit at merge[g·D + c0] = merge[8t], so the teams fill merge exactly.
  const int64_t stride = PartialFloats(D);
  float* partial = partials + (static_cast<int64_t>(blockIdx.x) * n_splits + blockIdx.y) *
                                  kMaxPagedRows * stride;
#pragma unroll
  for (int i = 0; i < kMaxPagedRows; ++i) {
    if (i >= n_q) break;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 8; ++e) merge[8 * t + e] = values ? acc[i][e] : 0.0f;
    __syncthreads();
    for (int64_t c = t; c < D; c += kThreads) {
      float x = 0.0f;
      for (int g = 0; g < groups; ++g) x += merge[g * D + c];
      partial[i * stride + 2 + c] = x;
    }
  }
  if (t < n_q) {
    partial[t * stride] = m_s[t];
    partial[t * stride + 1] = l_s[t];
  }
}

// One block per query: merges its splits' partials into out.
__global__ void MergeKernel(const PagedQuery* queries, int n_splits, int64_t head_dim,
                            const float* partials) {
  const PagedQuery query = queries[blockIdx.x];
  const int64_t stride = PartialFloats(head_dim);
  const int32_t pages = query.page_end - query.page_begin;
  const int used = static_cast<int>((pages + kPagesPerSplit - 1) / kPagesPerSplit);
  for (int i = 0; i < query.n_q; ++i) {
    const float* base = partials +
                        static_cast<int64_t>(blockIdx.x) * n_splits * kMaxPagedRows * stride +
                        i * stride;
    float mm = -INFINITY;
    for (int s = 0; s < used; ++s) mm = fmaxf(mm, base[s * kMaxPagedRows * stride]);
    float ll = 0.0f;
    for (int s = 0; s < used; ++s) {
      const float* part = base + s * kMaxPagedRows * stride;
      if (mm != -INFINITY) ll += part[1] * __expf(part[0] - mm);
    }
    for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
      float x = 0.0f;
      for (int s = 0; s < used && ll > 0.0f; ++s) {
        const float* part = base + s * kMaxPagedRows * stride;
        x += part[2 + c] * __expf(part[0] - mm);
      }
      query.out[i * head_dim + c] = ll > 0.0f ? x / ll : 0.0f;
    }
  }
}

}  // namespace

int64_t PagedScratchFloats(int64_t n_queries, int64_t max_pages, int64_t head_dim) {
  const int64_t splits = std::max<int64_t>(1, internal::CeilDiv(max_pages, kPagesPerSplit));
  return n_queries * splits * kMaxPagedRows * PartialFloats(head_dim);
}

cudaError_t AttendPagedBatch(const PagedQuery* queries, int64_t n_queries, const KvPageView* pages,
                             int64_t max_pages, float scale, int64_t head_dim, float* scratch,
                             cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % 8 != 0) return cudaErrorInvalidValue;
  if (n_queries == 0) return cudaSuccess;
  const int n_splits =
      static_cast<int>(std::max<int64_t>(1, internal::CeilDiv(max_pages, kPagesPerSplit)));
  const dim3 grid(static_cast<unsigned>(n_queries), static_cast<unsigned>(n_splits));
  SplitKernel<<<grid, kThreads, 0, stream>>>(queries, pages, scale, head_dim, n_splits, scratch);
  if (const cudaError_t e = internal::LaunchResult(); e != cudaSuccess) return e;
  MergeKernel<<<static_cast<unsigned>(n_queries), 128, 0, stream>>>(queries, n_splits, head_dim,
                                                                    scratch);
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda

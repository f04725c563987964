// AttendPagedBatch: one block per (query, split of kPagesPerSplit pages), four warps taking the
// split's rows in turn; a lane holds head_dim / 32 channels of every query row and decodes its
// channels of each key and value row in registers, whatever the page's format. Each warp keeps an
// online softmax per query row; the warps merge in shared memory into the split's partial
// (max, sum, weighted values), and a second kernel merges the splits.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_util.cuh"

namespace glimpse::kernels::cuda {
namespace {

using internal::Bf16Bits;
using internal::E4m3Bits;
using internal::HalfBits;
using internal::WarpSum;

constexpr int kPagesPerSplit = 4;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKiviGroup = 32;   // rows per key group, channels per value group (kvpage/codec.h)
constexpr int kMaxChannels = 8;  // per lane: head_dim ≤ 256

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

template <int C>  // channels per lane: channel lane + 32c for c < C, those below head_dim
__global__ void __launch_bounds__(kThreads)
    SplitKernel(const PagedQuery* queries, const KvPageView* pages, float scale, int64_t D,
                int n_splits, float* partials) {
  const PagedQuery query = queries[blockIdx.x];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_q = query.n_q;

  float q[kMaxPagedRows][C], acc[kMaxPagedRows][C], m[kMaxPagedRows], l[kMaxPagedRows];
  int32_t qp[kMaxPagedRows];
#pragma unroll
  for (int i = 0; i < kMaxPagedRows; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    qp[i] = i < n_q ? query.q_pos[i] : 0;
    for (int c = 0; c < C; ++c) {
      const int64_t ch = lane + 32 * c;
      q[i][c] = i < n_q && ch < D ? query.q[i * D + ch] * scale : 0.0f;
      acc[i][c] = 0.0f;
    }
  }

  const int32_t first = query.page_begin + static_cast<int32_t>(blockIdx.y) * kPagesPerSplit;
  const int32_t last = min(query.page_end, first + kPagesPerSplit);
  int64_t seen = 0;  // rows of the split before this page, so warps take rows in turn
  for (int32_t pi = first; pi < last; ++pi) {
    const KvPageView page = pages[pi];
    for (int64_t r = (warp - seen % kWarps + kWarps) % kWarps; r < page.rows; r += kWarps) {
      const int32_t pos = page.pos[r];
      float kx[C], vx[C];
      for (int c = 0; c < C; ++c) {
        const int64_t ch = lane + 32 * c;
        kx[c] = ch < D ? PageElement(page, true, r, ch, D) : 0.0f;
        vx[c] = ch < D ? PageElement(page, false, r, ch, D) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kMaxPagedRows; ++i) {
        if (i >= n_q) break;
        float s = 0.0f;
        for (int c = 0; c < C; ++c) s += q[i][c] * kx[c];
        s = WarpSum(s);
        if (pos > qp[i]) continue;
        const float m_new = fmaxf(m[i], s);
        const float alpha = __expf(m[i] - m_new), p = __expf(s - m_new);
        l[i] = l[i] * alpha + p;
        for (int c = 0; c < C; ++c) acc[i][c] = acc[i][c] * alpha + p * vx[c];
        m[i] = m_new;
      }
    }
    seen += page.rows;
  }

  // Merge the warps' states through shared memory: warp w's row i at state[w][i].
  __shared__ float state[kWarps][kMaxPagedRows][2];
  __shared__ float values[kWarps][kMaxPagedRows][32 * C];
  // Fixed trip counts keep q, acc, m and l in registers (a runtime index would spill them).
#pragma unroll
  for (int i = 0; i < kMaxPagedRows; ++i) {
    if (i >= n_q) break;
    if (lane == 0) {
      state[warp][i][0] = m[i];
      state[warp][i][1] = l[i];
    }
#pragma unroll
    for (int c = 0; c < C; ++c) values[warp][i][lane + 32 * c] = acc[i][c];  // ≥ D: unread
  }
  __syncthreads();
  const int64_t stride = PartialFloats(D);
  float* partial = partials + (static_cast<int64_t>(blockIdx.x) * n_splits + blockIdx.y) *
                                  kMaxPagedRows * stride;
  for (int i = warp; i < n_q; i += kWarps) {
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, state[w][i][0]);
    float ll = 0.0f;
    float weight[kWarps];
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = mm == -INFINITY ? 0.0f : __expf(state[w][i][0] - mm);
      ll += state[w][i][1] * weight[w];
    }
    float* row = partial + i * stride;
    if (lane == 0) {
      row[0] = mm;
      row[1] = ll;
    }
    for (int64_t c = lane; c < D; c += 32) {
      float x = 0.0f;
      for (int w = 0; w < kWarps; ++w) x += values[w][i][c] * weight[w];
      row[2 + c] = x;
    }
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

template <int C>
void LaunchSplits(const PagedQuery* queries, int64_t n_queries, const KvPageView* pages,
                  int n_splits, float scale, int64_t head_dim, float* scratch,
                  cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_queries), static_cast<unsigned>(n_splits));
  SplitKernel<C><<<grid, kThreads, 0, stream>>>(queries, pages, scale, head_dim, n_splits, scratch);
}

}  // namespace

int64_t PagedScratchFloats(int64_t n_queries, int64_t max_pages, int64_t head_dim) {
  const int64_t splits = std::max<int64_t>(1, internal::CeilDiv(max_pages, kPagesPerSplit));
  return n_queries * splits * kMaxPagedRows * PartialFloats(head_dim);
}

cudaError_t AttendPagedBatch(const PagedQuery* queries, int64_t n_queries, const KvPageView* pages,
                             int64_t max_pages, float scale, int64_t head_dim, float* scratch,
                             cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > 32 * kMaxChannels) return cudaErrorInvalidValue;
  if (n_queries == 0) return cudaSuccess;
  const int n_splits =
      static_cast<int>(std::max<int64_t>(1, internal::CeilDiv(max_pages, kPagesPerSplit)));
  const int64_t lanes_c = internal::CeilDiv(head_dim, 32);
  if (lanes_c == 1) {
    LaunchSplits<1>(queries, n_queries, pages, n_splits, scale, head_dim, scratch, stream);
  } else if (lanes_c == 2) {
    LaunchSplits<2>(queries, n_queries, pages, n_splits, scale, head_dim, scratch, stream);
  } else if (lanes_c <= 4) {
    LaunchSplits<4>(queries, n_queries, pages, n_splits, scale, head_dim, scratch, stream);
  } else {
    LaunchSplits<8>(queries, n_queries, pages, n_splits, scale, head_dim, scratch, stream);
  }
  if (const cudaError_t e = internal::LaunchResult(); e != cudaSuccess) return e;
  MergeKernel<<<static_cast<unsigned>(n_queries), 128, 0, stream>>>(queries, n_splits, head_dim,
                                                                    scratch);
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda

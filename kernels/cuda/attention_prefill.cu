// AttendPrefill: one block per (64-query tile, q-head), four warps of 16 query rows each. Per
// 64-key tile: S = Q·Kᵀ on tensor cores (WMMA 16×16×16, fp16 in, fp32 out) into shared memory;
// each warp's online-softmax update of its rows (mask by position, running max and sum, rescale of
// the fp32 output rows); then O += P·V on tensor cores. A key tile no query of the block can see
// (every position above the tile's largest query position: the causal upper triangle of a prompt)
// is skipped after its positions are read.
#include <mma.h>

#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_util.cuh"

namespace glimpse::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using internal::WarpMax;
using internal::WarpSum;

constexpr int kRows = 64;  // queries per block
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;  // each owns kRows / kWarps = 16 query rows
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;  // halves of padding per shared row, against bank conflicts

// Shared memory of one block, row strides in elements.
template <int D>
struct Smem {
  static constexpr int kLdh = D + kPad;      // Q, K, V rows (fp16)
  static constexpr int kLds = kKeys + 4;     // S rows (fp32)
  static constexpr int kLdp = kKeys + kPad;  // P rows (fp16)
  static constexpr int kLdo = D + 4;         // O rows (fp32)
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(__half) * kRows * kLdh;
  static constexpr size_t kV = kK + sizeof(__half) * kKeys * kLdh;
  static constexpr size_t kS = kV + sizeof(__half) * kKeys * kLdh;
  static constexpr size_t kP = kS + sizeof(float) * kRows * kLds;
  static constexpr size_t kO = kP + sizeof(__half) * kRows * kLdp;
  static constexpr size_t kM = kO + sizeof(float) * kRows * kLdo;
  static constexpr size_t kL = kM + sizeof(float) * kRows;
  static constexpr size_t kQPos = kL + sizeof(float) * kRows;
  static constexpr size_t kKPos = kQPos + sizeof(int32_t) * kRows;
  static constexpr size_t kBytes = kKPos + sizeof(int32_t) * kKeys;
};

// rows × D halves from `src` (row r at src + r·stride) into shared `dst`; rows ≥ n are zeros.
template <int D>
__device__ void LoadTile(__half* dst, const __half* src, int64_t stride, int rows, int64_t n) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < rows * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    int4 x = make_int4(0, 0, 0, 0);
    if (r < n) x = *reinterpret_cast<const int4*>(src + r * stride + c);
    *reinterpret_cast<int4*>(dst + r * Smem<D>::kLdh + c) = x;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    PrefillKernel(float* out, float* lse, const __half* q, const int32_t* q_pos, const __half* k,
                  const __half* v, KvStrides kv, const int32_t* kv_pos, float scale, int64_t n_q,
                  int64_t n_kv, int64_t n_heads, int64_t n_kv_heads) {
  using S = Smem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem + S::kQ);
  __half* ks = reinterpret_cast<__half*>(smem + S::kK);
  __half* vs = reinterpret_cast<__half*>(smem + S::kV);
  float* ss = reinterpret_cast<float*>(smem + S::kS);
  __half* ps = reinterpret_cast<__half*>(smem + S::kP);
  float* os = reinterpret_cast<float*>(smem + S::kO);
  float* ms = reinterpret_cast<float*>(smem + S::kM);
  float* ls = reinterpret_cast<float*>(smem + S::kL);
  int32_t* qpos_s = reinterpret_cast<int32_t*>(smem + S::kQPos);
  int32_t* kpos_s = reinterpret_cast<int32_t*>(smem + S::kKPos);
  __shared__ int32_t tile_max_pos;

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t h = blockIdx.y, kvh = h / (n_heads / n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q_rows = min(static_cast<int64_t>(kRows), n_q - q0);

  LoadTile<D>(qs, q + (q0 * n_heads + h) * D, n_heads * D, kRows, q_rows);
  if (threadIdx.x == 0) tile_max_pos = INT_MIN;
  for (int i = threadIdx.x; i < kRows * S::kLdo; i += kThreads) os[i] = 0.0f;
  __syncthreads();
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    qpos_s[r] = r < q_rows ? q_pos[q0 + r] : INT_MIN;
    ms[r] = -INFINITY;
    ls[r] = 0.0f;
    if (r < q_rows) atomicMax(&tile_max_pos, qpos_s[r]);
  }
  __syncthreads();
  const int32_t max_pos = tile_max_pos;

  const int row0 = warp * 16;
  for (int64_t j0 = 0; j0 < n_kv; j0 += kKeys) {
    const int64_t keys = min(static_cast<int64_t>(kKeys), n_kv - j0);
    bool visible = false;
    if (threadIdx.x < kKeys) {
      kpos_s[threadIdx.x] = threadIdx.x < keys ? kv_pos[j0 + threadIdx.x] : INT_MAX;
      visible = kpos_s[threadIdx.x] <= max_pos;
    }
    if (!__syncthreads_or(visible)) continue;
    LoadTile<D>(ks, k + j0 * kv.row + kvh * kv.head, kv.row, kKeys, keys);
    LoadTile<D>(vs, v + j0 * kv.row + kvh * kv.head, kv.row, kKeys, keys);
    __syncthreads();

    // S[row0 .. row0+16, :] = Q·Kᵀ.
    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::load_matrix_sync(a, qs + row0 * S::kLdh + kk * 16, S::kLdh);
        wmma::load_matrix_sync(b, ks + n * 16 * S::kLdh + kk * 16, S::kLdh);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + row0 * S::kLds + n * 16, acc, S::kLds, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over the warp's rows: lanes hold columns lane and lane + 32.
    for (int rr = 0; rr < 16; ++rr) {
      const int row = row0 + rr;
      const int32_t qp = qpos_s[row];
      float s[2];
      for (int c = 0; c < 2; ++c) {
        const int col = lane + 32 * c;
        s[c] = kpos_s[col] <= qp ? ss[row * S::kLds + col] * scale : -INFINITY;
      }
      const float m_old = ms[row];
      const float m_new = fmaxf(m_old, WarpMax(fmaxf(s[0], s[1])));
      const bool none = m_new == -INFINITY;
      const float alpha = none ? 1.0f : __expf(m_old - m_new);
      float sum = 0.0f;
      for (int c = 0; c < 2; ++c) {
        const float p = none ? 0.0f : __expf(s[c] - m_new);
        sum += p;
        ps[row * S::kLdp + lane + 32 * c] = __float2half_rn(p);
      }
      sum = WarpSum(sum);
      for (int c = lane; c < D; c += 32) os[row * S::kLdo + c] *= alpha;
      if (lane == 0) {
        ms[row] = m_new;
        ls[row] = ls[row] * alpha + sum;
      }
    }
    __syncwarp();

    // O[row0 .. row0+16, :] += P·V.
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + row0 * S::kLdo + n * 16, S::kLdo, wmma::mem_row_major);
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(a, ps + row0 * S::kLdp + kk * 16, S::kLdp);
        wmma::load_matrix_sync(b, vs + kk * 16 * S::kLdh + n * 16, S::kLdh);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(os + row0 * S::kLdo + n * 16, acc, S::kLdo, wmma::mem_row_major);
    }
    __syncthreads();  // K, V and the tile's positions are reloaded next
  }

  for (int rr = 0; rr < 16; ++rr) {
    const int row = row0 + rr;
    if (row >= q_rows) break;
    const float l = ls[row];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* dst = out + ((q0 + row) * n_heads + h) * D;
    for (int c = lane; c < D; c += 32) dst[c] = os[row * S::kLdo + c] * inv;
    if (lse != nullptr && lane == 0) {
      lse[h * n_q + q0 + row] = l > 0.0f ? ms[row] + logf(l) : -INFINITY;
    }
  }
}

template <int D>
cudaError_t Launch(float* out, float* lse, const void* q, const int32_t* q_pos, const void* k,
                   const void* v, KvStrides kv, const int32_t* kv_pos, float scale, int64_t n_q,
                   int64_t n_kv, int64_t n_heads, int64_t n_kv_heads, cudaStream_t stream) {
  constexpr size_t kBytes = Smem<D>::kBytes;
  static const cudaError_t configured = cudaFuncSetAttribute(
      PrefillKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes));
  if (configured != cudaSuccess) return configured;
  const dim3 grid(static_cast<unsigned>(internal::CeilDiv(n_q, kRows)),
                  static_cast<unsigned>(n_heads));
  PrefillKernel<D><<<grid, kThreads, kBytes, stream>>>(
      out, lse, static_cast<const __half*>(q), q_pos, static_cast<const __half*>(k),
      static_cast<const __half*>(v), kv, kv_pos, scale, n_q, n_kv, n_heads, n_kv_heads);
  return internal::LaunchResult();
}

}  // namespace

cudaError_t AttendPrefill(float* out, float* lse, const void* q, const int32_t* q_pos,
                          const void* k, const void* v, KvStrides kv, const int32_t* kv_pos,
                          float scale, int64_t n_q, int64_t n_kv, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) return cudaErrorInvalidValue;
  if (n_q == 0 || n_heads == 0) return cudaSuccess;
  switch (head_dim) {
    case 16:
      return Launch<16>(out, lse, q, q_pos, k, v, kv, kv_pos, scale, n_q, n_kv, n_heads, n_kv_heads,
                        stream);
    case 32:
      return Launch<32>(out, lse, q, q_pos, k, v, kv, kv_pos, scale, n_q, n_kv, n_heads, n_kv_heads,
                        stream);
    case 64:
      return Launch<64>(out, lse, q, q_pos, k, v, kv, kv_pos, scale, n_q, n_kv, n_heads, n_kv_heads,
                        stream);
    case 128:
      return Launch<128>(out, lse, q, q_pos, k, v, kv, kv_pos, scale, n_q, n_kv, n_heads,
                         n_kv_heads, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// One thread per (entry, head, channel).
static __global__ void AppendKvKernel(__half* cache_k, __half* cache_v, const float* k,
                                      const float* v, int64_t n, int64_t first, int64_t capacity,
                                      int64_t n_kv_heads, int64_t head_dim) {
  const int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (at >= n * n_kv_heads * head_dim) return;
  const int64_t c = at % head_dim, g = (at / head_dim) % n_kv_heads,
                t = at / (head_dim * n_kv_heads);
  const int64_t dst = (g * capacity + first + t) * head_dim + c;
  cache_k[dst] = __float2half_rn(k[at]);
  cache_v[dst] = __float2half_rn(v[at]);
}

cudaError_t AppendKv(void* cache_k, void* cache_v, const float* k, const float* v, int64_t n,
                     int64_t first, int64_t capacity, int64_t n_kv_heads, int64_t head_dim,
                     cudaStream_t stream) {
  if (first < 0 || first + n > capacity) return cudaErrorInvalidValue;
  const int64_t total = n * n_kv_heads * head_dim;
  if (total == 0) return cudaSuccess;
  AppendKvKernel<<<static_cast<unsigned>(internal::CeilDiv(total, 256)), 256, 0, stream>>>(
      static_cast<__half*>(cache_k), static_cast<__half*>(cache_v), k, v, n, first, capacity,
      n_kv_heads, head_dim);
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda

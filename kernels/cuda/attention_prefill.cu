// AttendPrefill: one block per (128-query tile, q-head), eight warps of 16 query rows each, in
// FlashAttention-2's form: per 64-key tile, S = Q·Kᵀ with mma.sync (m16n8k16, fp16 in, fp32
// accumulate) into registers; the online softmax on those registers (a row's values live in one
// quad of lanes); P, rounded to fp16, reused in registers as the A operand of O += P·V. Q, K and V
// tiles pass through shared memory by ldmatrix (V transposed); K and V come in by cp.async into
// two buffers, the next visible tile's while the current one is computed. A key tile no query of
// the block can see (every position above the block's largest query position: the causal upper
// triangle of a prompt) is skipped after its positions are read, before its keys are.
#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_util.cuh"

namespace glimpse::kernels::cuda {
namespace {

constexpr int kRows = 128;  // queries per block
constexpr int kKeys = 64;   // keys per tile
constexpr int kWarps = 8;   // each owns kRows / kWarps = 16 query rows
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;  // halves of padding per shared row: ldmatrix without bank conflicts

template <int D>
struct Smem {
  static constexpr int kLd = D + kPad;  // Q, K, V rows (fp16)
  static constexpr size_t kQ = 0;
  static constexpr size_t kTile = sizeof(__half) * kKeys * kLd;    // one K or V buffer
  static constexpr size_t kK = kQ + sizeof(__half) * kRows * kLd;  // K buffers 0, 1
  static constexpr size_t kV = kK + 2 * kTile;                     // V buffers 0, 1
  static constexpr size_t kQPos = kV + 2 * kTile;
  static constexpr size_t kKPos = kQPos + sizeof(int32_t) * kRows;  // [2][kKeys]
  static constexpr size_t kBytes = kKPos + 2 * sizeof(int32_t) * kKeys;
};

// rows × D halves from `src` (row r at src + r·stride) into shared `dst`; rows ≥ n are zeros.
template <int D>
__device__ void LoadTile(__half* dst, const __half* src, int64_t stride, int rows, int64_t n) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < rows * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    int4 x = make_int4(0, 0, 0, 0);
    if (r < n) x = *reinterpret_cast<const int4*>(src + r * stride + c);
    *reinterpret_cast<int4*>(dst + r * Smem<D>::kLd + c) = x;
  }
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared without passing through registers; `bytes` 0 writes zeros.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n"); }
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Rows [j0, j0 + kKeys) of one kv-head's K and V into shared buffers (rows past n_kv: zeros).
template <int D>
__device__ void IssueKv(__half* ks, __half* vs, const __half* k, const __half* v, int64_t j0,
                        int64_t n_kv, int64_t stride) {
  constexpr int kVecs = D / 8;
  for (int i = threadIdx.x; i < kKeys * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    const bool in = j0 + r < n_kv;
    const int64_t at = in ? (j0 + r) * stride + c : 0;
    CpAsync16(ks + r * Smem<D>::kLd + c, k + at, in ? 16 : 0);
    CpAsync16(vs + r * Smem<D>::kLd + c, v + at, in ? 16 : 0);
  }
}

// The first key tile at or after `tile` that some query of the block sees (n_tiles if none); a
// thread t < kKeys returns that tile's position t in `pos` (INT_MAX past n_kv). Every thread calls.
__device__ int64_t NextVisibleTile(int64_t tile, int64_t n_tiles, const int32_t* kv_pos,
                                   int64_t n_kv, int32_t max_pos, int32_t& pos) {
  for (; tile < n_tiles; ++tile) {
    const int64_t j = tile * kKeys + threadIdx.x;
    pos = threadIdx.x < kKeys && j < n_kv ? kv_pos[j] : INT_MAX;
    if (__syncthreads_or(threadIdx.x < kKeys && pos <= max_pos)) return tile;
  }
  return n_tiles;
}

// Four 8×8 fp16 matrices from shared memory; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void LdMatrix4(uint32_t (&r)[4], const __half* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

__device__ __forceinline__ void LdMatrix4Trans(uint32_t (&r)[4], const __half* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

// d += a·b for one m16n8k16 tile: a the 16×16 fp16 A fragment, b0/b1 the 16×8 B fragment.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Lane l holds rows g = l / 4 and g + 8 of its warp's 16, and of each 8-column tile the columns
// 2·(l % 4) and 2·(l % 4) + 1 (the mma accumulator layout).
template <int D>
__global__ void __launch_bounds__(kThreads, D >= 128 ? 1 : 2)
    PrefillKernel(float* out, float* lse, const __half* q, const int32_t* q_pos, const __half* k,
                  const __half* v, KvStrides kv, const int32_t* kv_pos, float scale, int64_t n_q,
                  int64_t n_kv, int64_t n_heads, int64_t n_kv_heads) {
  using S = Smem<D>;
  constexpr int kLd = S::kLd, kDTiles = D / 8, kKTiles = kKeys / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem + S::kQ);
  __half* ks0 = reinterpret_cast<__half*>(smem + S::kK);
  __half* vs0 = reinterpret_cast<__half*>(smem + S::kV);
  int32_t* qpos_s = reinterpret_cast<int32_t*>(smem + S::kQPos);
  int32_t* kpos0 = reinterpret_cast<int32_t*>(smem + S::kKPos);
  __shared__ int32_t tile_max_pos;

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t h = blockIdx.y, kvh = h / (n_heads / n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q_rows = min(static_cast<int64_t>(kRows), n_q - q0);
  const int row0 = warp * 16, g = lane / 4, col2 = 2 * (lane % 4);

  LoadTile<D>(qs, q + (q0 * n_heads + h) * D, n_heads * D, kRows, q_rows);
  if (threadIdx.x == 0) tile_max_pos = INT_MIN;
  __syncthreads();
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    qpos_s[r] = r < q_rows ? q_pos[q0 + r] : INT_MIN;
    if (r < q_rows) atomicMax(&tile_max_pos, qpos_s[r]);
  }
  __syncthreads();
  const int32_t max_pos = tile_max_pos;
  const int32_t my_pos[2] = {qpos_s[row0 + g], qpos_s[row0 + g + 8]};

  // The warp's Q rows as A fragments, one per 16 channels.
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    LdMatrix4(qa[kk], qs + (row0 + lane % 16) * kLd + kk * 16 + (lane / 16) * 8);
  }
  float o[kDTiles][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only

  const __half* k_head = k + kvh * kv.head;
  const __half* v_head = v + kvh * kv.head;
  const int64_t n_tiles = (n_kv + kKeys - 1) / kKeys;
  int32_t my_kpos;
  int64_t tile = NextVisibleTile(0, n_tiles, kv_pos, n_kv, max_pos, my_kpos);
  int buf = 0;
  if (tile < n_tiles) {
    if (threadIdx.x < kKeys) kpos0[threadIdx.x] = my_kpos;
    IssueKv<D>(ks0, vs0, k_head, v_head, tile * kKeys, n_kv, kv.row);
  }
  CpAsyncCommit();
  while (tile < n_tiles) {
    // Start the next visible tile's loads into the other buffer, then wait for this one's.
    const int64_t next = NextVisibleTile(tile + 1, n_tiles, kv_pos, n_kv, max_pos, my_kpos);
    if (next < n_tiles) {
      if (threadIdx.x < kKeys) kpos0[(buf ^ 1) * kKeys + threadIdx.x] = my_kpos;
      IssueKv<D>(ks0 + (buf ^ 1) * kKeys * kLd, vs0 + (buf ^ 1) * kKeys * kLd, k_head, v_head,
                 next * kKeys, n_kv, kv.row);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const __half* ks = ks0 + buf * kKeys * kLd;
    const __half* vs = vs0 + buf * kKeys * kLd;
    const int32_t* kpos_s = kpos0 + buf * kKeys;

    // S = Q·Kᵀ: B fragments from K's rows (keys) as stored; two key tiles per ldmatrix.x4.
    float s[kKTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < kKTiles; nt += 2) {
        uint32_t b[4];
        LdMatrix4(
            b, ks + (nt * 8 + (lane / 16) * 8 + lane % 8) * kLd + kk * 16 + ((lane / 8) % 2) * 8);
        Mma(s[nt], qa[kk], b[0], b[1]);
        Mma(s[nt + 1], qa[kk], b[2], b[3]);
      }
    }

    // Online softmax of rows g and g + 8: the row's max over its quad of lanes.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kKTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2, col = nt * 8 + col2 + e % 2;
        const float x = kpos_s[col] <= my_pos[half] ? s[nt][e] * scale : -INFINITY;
        s[nt][e] = x;
        tile_max[half] = fmaxf(tile_max[half], x);
      }
    }
    float alpha[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = tile_max[half];
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[half], mx);
      alpha[half] = m_new == -INFINITY ? 1.0f : __expf(m[half] - m_new);
      m[half] = m_new;
      l[half] *= alpha[half];
    }
#pragma unroll
    for (int nt = 0; nt < kKTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const float p = m[half] == -INFINITY ? 0.0f : __expf(s[nt][e] - m[half]);
        s[nt][e] = p;
        l[half] += p;
      }
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[dt][0] *= alpha[0], o[dt][1] *= alpha[0], o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
    }

    // O += P·V: P's accumulators are the A fragments of 16-key steps; V's B fragments by
    // ldmatrix.trans, two channel tiles per x4.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackHalf2(s[2 * kk][0], s[2 * kk][1]),
                              PackHalf2(s[2 * kk][2], s[2 * kk][3]),
                              PackHalf2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackHalf2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt += 2) {
        uint32_t b[4];
        LdMatrix4Trans(b, vs + (kk * 16 + lane % 16) * kLd + dt * 8 + (lane / 16) * 8);
        Mma(o[dt], pa, b[0], b[1]);
        Mma(o[dt + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is refilled next
    tile = next;
    buf ^= 1;
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row0 + g + 8 * half;
    if (row >= q_rows) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* dst = out + ((q0 + row) * n_heads + h) * D;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      *reinterpret_cast<float2*>(dst + dt * 8 + col2) =
          make_float2(o[dt][2 * half] * inv, o[dt][2 * half + 1] * inv);
    }
    if (lse != nullptr && lane % 4 == 0) {
      lse[h * n_q + q0 + row] = sum > 0.0f ? m[half] + logf(sum) : -INFINITY;
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

}  // namespace glimpse::kernels::cuda

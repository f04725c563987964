// Element-wise and row-wise transformer ops (fp32). Output first, dimensions last; rows are
// contiguous. These are the CPU reference contracts; CUDA twins take the same arguments + a stream.
#pragma once

#include <cstdint>

namespace glimpse::kernels {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w[:]; x,out: [rows, dim], w: [dim].
// `out` may alias `x`.
void RmsNorm(float* out, const float* x, const float* w, float eps, int64_t rows, int64_t dim);

// How RoPE pairs the channels of a head. kInterleaved rotates (x[2i], x[2i+1]) (GGML's "norm"
// mode, used for llama-arch GGUF files whose q/k weights were permuted on conversion); kHalf
// rotates (x[i], x[i + d/2]) (GGML "neox" mode, Hugging Face checkpoints, Qwen2/3).
enum class RopeStyle { kInterleaved, kHalf };

// Rotates x in place: x: [n_tokens, n_heads, head_dim], pos: [n_tokens] (token positions),
// inv_freq: [head_dim / 2] (θ_i = pos · inv_freq[i]).
void Rope(float* x, const int32_t* pos, const float* inv_freq, RopeStyle style, int64_t n_tokens,
          int64_t n_heads, int64_t head_dim);

// out[i] = silu(gate[i]) · up[i]; silu(g) = g / (1 + e^−g). `out` may alias either input.
void SiluMul(float* out, const float* gate, const float* up, int64_t n);

// x[r, :] += bias[:]; x: [rows, dim].
void AddBias(float* x, const float* bias, int64_t rows, int64_t dim);

// x[i] += y[i] (residual connection).
void Add(float* x, const float* y, int64_t n);

// Numerically stable softmax of each row in place; x: [rows, n].
void SoftmaxRows(float* x, int64_t rows, int64_t n);

}  // namespace glimpse::kernels

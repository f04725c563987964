// Internal to kernels/cpu: scalar references of the ops that have AVX2 fast paths (ops.h gives
// the contracts), for element-wise tests.
#pragma once

#include <cstdint>

namespace glimpse::kernels::internal {

void RmsNormRef(float* out, const float* x, const float* w, float eps, int64_t rows, int64_t dim);
void SiluMulRef(float* out, const float* gate, const float* up, int64_t n);
void SoftmaxRowsRef(float* x, int64_t rows, int64_t n);

}  // namespace glimpse::kernels::internal

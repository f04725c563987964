// Test helpers shared by the kernels/cpu tests: seeded random data and element-wise comparison
// |x − ref| ≤ atol + rtol·|ref| that reports the first mismatches and fails on any.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace glimpse::kernels::testing {

// The odd sizes every sweep covers (STYLE.md): small, prime, and one larger than typical vectors.
inline const std::vector<int64_t>& OddSizes() {
  static const std::vector<int64_t> sizes = {1, 3, 7, 19, 37, 128, 733};
  return sizes;
}

inline std::vector<float> RandomFloats(int64_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Returns true when every element satisfies |got − ref| ≤ atol + rtol·|ref| (NaN only matches NaN).
inline ::testing::AssertionResult AllClose(const float* got, const float* ref, int64_t n,
                                           float atol, float rtol) {
  int64_t bad = 0;
  ::testing::AssertionResult result = ::testing::AssertionFailure();
  for (int64_t i = 0; i < n; ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(ref[i]);
    const bool close = both_nan || got[i] == ref[i] ||
                       std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]);
    if (close) continue;
    if (++bad <= 5) result << "[" << i << "] got " << got[i] << " ref " << ref[i] << "; ";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return result << bad << " of " << n << " elements differ (atol " << atol << ", rtol " << rtol
                << ")";
}

inline ::testing::AssertionResult AllClose(const std::vector<float>& got,
                                           const std::vector<float>& ref, float atol, float rtol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size mismatch";
  return AllClose(got.data(), ref.data(), static_cast<int64_t>(got.size()), atol, rtol);
}

}  // namespace glimpse::kernels::testing

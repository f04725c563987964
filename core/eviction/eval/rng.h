// A fixed, platform-independent random stream for the harness's generated tasks (splitmix64;
// std::uniform_int_distribution is not the same everywhere), so that a seed names the same task on
// every machine.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace glimpse::eviction::eval {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (modulo bias is irrelevant here).
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Next() % N];
  }
  // k distinct indices of [0, n), in random order.
  std::vector<int64_t> Distinct(int64_t n, int64_t k) {
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    for (int64_t i = 0; i < k; ++i) std::swap(all[i], all[Between(i, n - 1)]);
    all.resize(k);
    return all;
  }

 private:
  uint64_t state_;
};

}  // namespace glimpse::eviction::eval

// Token sampling from logits: greedy (temperature 0), or temperature with optional top-k and
// top-p (nucleus), seeded for reproducibility. Filters apply in the order top-k → softmax(T) →
// top-p, as llama.cpp and Hugging Face do.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "absl/status/statusor.h"

namespace glimpse::model {

struct SamplingOptions {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  // InvalidArgument for negative temperature or top_k, or top_p outside (0, 1].
  static absl::StatusOr<Sampler> Create(const SamplingOptions& options);

  int32_t Sample(std::span<const float> logits);

 private:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}

  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace glimpse::model

#include "core/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_format.h"

namespace glimpse::model {
namespace {

int32_t Argmax(std::span<const float> logits) {
  // std::max_element returns the first maximum, so ties go to the lowest id.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

absl::StatusOr<Sampler> Sampler::Create(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("temperature must be a finite value >= 0, got %g", options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k must be >= 0 (0 = off), got %d", options.top_k));
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_p must be in (0, 1] (1 = off), got %g", options.top_p));
  }
  return Sampler(options);
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f || options_.top_k == 1) return Argmax(logits);

  // Candidates sorted by logit, descending; top-k truncates.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = options_.top_k > 0 ? std::min<size_t>(options_.top_k, ids.size()) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(k);

  // Softmax at temperature T over the survivors.
  std::vector<double> probs(k);
  const double max_logit = logits[ids[0]];
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    probs[i] = std::exp((logits[ids[i]] - max_logit) / options_.temperature);
    sum += probs[i];
  }
  // Top-p keeps the smallest prefix whose mass reaches p (always at least one token).
  size_t keep = k;
  double mass = 0.0;
  for (size_t i = 0; i < k; ++i) {
    mass += probs[i] / sum;
    if (mass >= options_.top_p) {
      keep = i + 1;
      break;
    }
  }
  std::discrete_distribution<size_t> pick(probs.begin(), probs.begin() + keep);
  return ids[pick(rng_)];
}

}  // namespace glimpse::model

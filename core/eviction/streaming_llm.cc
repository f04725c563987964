// StreamingLLM (mit-han-lab/streaming-llm kv_cache.py StartRecentKVCache; kvpress
// presses/streaming_llm_press.py, n_sink = 4): keep the first 4 entries (attention sinks) and the
// most recent ones. kvpress writes 1 for kept and 0 for pruned entries, which needs the budget;
// here the order itself is the score, so any budget reproduces it under top-k selection:
//   s[kv, j] = T   for the sinks j < 4
//   s[kv, j] = j   otherwise (later = higher)
// The top C entries are then the 4 sinks and the last C − 4, exactly kvpress's kept set (and the
// shared selection's always-kept sinks + recent window agree with it). Scores are exact in fp32
// for T < 2^24. Reads nothing from the view but its sizes.
#include <algorithm>
#include <memory>

#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

constexpr int64_t kSinks = 4;

class StreamingLlmScorer final : public Scorer {
 public:
  std::string_view name() const override { return "streamingllm"; }
  uint32_t needs() const override { return 0; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    const int64_t T = view.n_tokens;
    for (int32_t kv = 0; kv < view.n_kv_heads; ++kv) {
      float* s = scores + kv * T;
      for (int64_t j = 0; j < T; ++j) {
        s[j] = j < kSinks ? static_cast<float>(T) : static_cast<float>(j);
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Scorer> NewStreamingLlmScorer() { return std::make_unique<StreamingLlmScorer>(); }

}  // namespace glimpse::eviction

// Eviction scorers: one interface, every method a plug-in (DESIGN.md section 4).
//
// After the prompt's prefill, each layer is presented to the scorer as a LayerView holding what the
// scorer declared it needs (needs() bit set), and the scorer writes fp32 scores [Hkv, T] — one per
// KV entry of each kv-head, higher = keep. Selection (selection.h) is separate and shared by all
// scorers. Scorers are stateless after construction and thread-compatible; Score() never keeps
// pointers from the view.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/weights.h"

namespace glimpse::eviction {

// What a scorer reads. Inputs not declared are nullptr in the view.
enum Need : uint32_t {
  kHiddenStates = 1u << 0,          // attention input of every prompt token (after attn_norm)
  kKeys = 1u << 1,                  // post-RoPE keys of every entry
  kValues = 1u << 2,                // values of every entry
  kWindowQueries = 1u << 3,         // post-RoPE queries of the last W prompt tokens
  kPreRopeQueries = 1u << 4,        // pre-RoPE queries of every prompt token
  kAccumulatedAttention = 1u << 5,  // Σ over all prompt queries of their attention to each key
  kLayerWeights = 1u << 6,          // the layer's weights (W_o for DefensiveKV, W_q for gates)
};

// One layer of the prompt, T tokens, as the scorer sees it. Shapes in comments; all fp32.
struct LayerView {
  int32_t layer = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;                           // H query heads
  int32_t n_kv_heads = 0;                        // Hkv; GQA group = H / Hkv
  int32_t head_dim = 0;                          // hd
  int32_t hidden = 0;                            // D
  int64_t n_tokens = 0;                          // T
  const int32_t* positions = nullptr;            // [T] token positions
  const float* hidden_states = nullptr;          // [T, D]             kHiddenStates
  const float* keys = nullptr;                   // [Hkv, T, hd]       kKeys
  const float* values = nullptr;                 // [Hkv, T, hd]       kValues
  int64_t window = 0;                            // W (<= T)           kWindowQueries
  const float* window_queries = nullptr;         // [H, W, hd]         kWindowQueries
  const float* pre_rope_queries = nullptr;       // [T, H, hd]         kPreRopeQueries
  const float* accumulated_attention = nullptr;  // [H, T]             kAccumulatedAttention
  const model::LayerWeights* weights = nullptr;  //                    kLayerWeights
  const float* rope_inv_freq = nullptr;          // [hd / 2] always set
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalf;
};

class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual std::string_view name() const = 0;
  virtual uint32_t needs() const = 0;
  // W, the number of trailing prompt queries the scorer reads (when it needs kWindowQueries).
  virtual int64_t window() const { return 0; }
  // Writes scores [Hkv, T]. InvalidArgument when the view lacks a declared input or T < window().
  virtual absl::Status Score(const LayerView& view, float* scores) const = 0;
};

// Parameters of a scorer by name; unknown keys are an error naming the key and the scorer.
struct ScorerConfig {
  std::string method;   // "snapkv", "streamingllm", "h2o", "expected_attention", "defensivekv", …
  int64_t window = 0;   // 0 = the method's default
  int64_t kernel = 0;   // pooling kernel, 0 = default
  std::string pooling;  // "avg" | "max" | "" = default
};

// Builds a scorer from the registry. NotFound listing the known methods for an unknown name.
absl::StatusOr<std::unique_ptr<Scorer>> CreateScorer(const ScorerConfig& config);

// The registry's method names, sorted.
std::vector<std::string> KnownScorers();

// Pooling of window scores along the key axis: stride 1, padding kernel / 2 (kernel odd, so the
// length is kept). kAvg counts the zero padding in the divisor (torch avg_pool1d's default,
// count_include_pad=True, as kvpress uses); kMax ignores the padding (torch max_pool1d).
enum class Pooling { kAvg, kMax };

// The built-in scorers with resolved parameters, as the registry builds them. CreateScorer is the
// public way in: it fills defaults and validates ranges; these trust their arguments.
std::unique_ptr<Scorer> NewSnapKvScorer(int64_t window, int64_t kernel, Pooling pooling);
std::unique_ptr<Scorer> NewStreamingLlmScorer();
std::unique_ptr<Scorer> NewH2oScorer();
std::unique_ptr<Scorer> NewExpectedAttentionScorer();
std::unique_ptr<Scorer> NewDefensiveKvScorer(int64_t window, int64_t kernel, Pooling pooling);

}  // namespace glimpse::eviction

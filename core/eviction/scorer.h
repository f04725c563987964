// Eviction scorers: one interface, every method a plug-in (DESIGN.md section 4).
//
// After the prompt's prefill, each layer is presented to the scorer as a LayerView holding what the
// scorer declared it needs (needs() bit set), and the scorer writes fp32 scores [Hkv, T] — one per
// KV entry of each kv-head, higher = keep. Selection (selection.h) is separate and shared by all
// scorers. Scorers are stateless after construction and thread-safe: the pipeline calls Score()
// for different layers of one prompt concurrently. Score() never keeps pointers from the view.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/weights.h"

namespace glimpse::eviction {

class LookaheadModule;  // core/eviction/lookahead_module.h

// What a scorer reads. Inputs not declared are nullptr in the view.
enum Need : uint32_t {
  kHiddenStates = 1u << 0,          // attention input of every prompt token (after attn_norm)
  kKeys = 1u << 1,                  // post-RoPE keys of every entry
  kValues = 1u << 2,                // values of every entry
  kWindowQueries = 1u << 3,         // post-RoPE queries of the last W prompt tokens
  kPreRopeQueries = 1u << 4,        // pre-RoPE queries of every prompt token
  kAccumulatedAttention = 1u << 5,  // Σ over all prompt queries of their attention to each key
  kLayerWeights = 1u << 6,          // the layer's weights (W_o for DefensiveKV, W_q for gates)
  // LookaheadKV: the lookahead rows' mean attention to each prompt key, from a second pass the
  // pipeline runs after the prefill with Scorer::lookahead_module()
  // (core/eviction/lookahead_pass.h).
  kLookaheadAttention = 1u << 7,
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
  const float* lookahead_attention = nullptr;    // [Hkv, T]           kLookaheadAttention
  // The model's kv-head of the view's head 0: views of one head of a session with history
  // (n_kv_heads = 1) name which; scorers with weights per kv-head read it.
  int32_t first_kv_head = 0;
  const float* rope_inv_freq = nullptr;  // [hd / 2] always set
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
  // The module whose second pass fills LayerView::lookahead_attention; non-null exactly when
  // needs() has kLookaheadAttention. Owned by the scorer.
  virtual const LookaheadModule* lookahead_module() const { return nullptr; }
  // Scorers that also rank layers (CAKE) return true and implement ScoreWithPreference, which
  // writes the same scores as Score() plus the layer's preference P_l > 0 (finite) for
  // Schedule::kCake (B_l ∝ P_l, selection.h). The pipeline calls it instead of Score() when the
  // schedule is kCake. The default is Unimplemented.
  virtual bool has_layer_preference() const { return false; }
  virtual absl::Status ScoreWithPreference(const LayerView& view, float* scores,
                                           double* preference) const {
    return absl::UnimplementedError(std::string(name()) + " has no layer preference");
  }
};

// Parameters of a scorer by name; unknown keys are an error naming the key and the scorer.
struct ScorerConfig {
  std::string method;   // "snapkv", "streamingllm", "h2o", "expected_attention", "defensivekv", …
  int64_t window = 0;   // 0 = the method's default
  int64_t kernel = 0;   // pooling kernel, 0 = default
  std::string pooling;  // "avg" | "max" | "" = default
  // Learned scorers only (kvzip_gate, trimkv_gate, retention_global, foresightkv): their
  // .safetensors weights, required there and rejected elsewhere. Tensor names are documented in
  // each scorer's file.
  std::string weights_path;
  // LookaheadKV only: the lookahead module (.safetensors, lookahead_module.h); required there
  // and rejected elsewhere.
  std::string module_path;
};

// Builds a scorer from the registry. NotFound listing the known methods for an unknown name.
absl::StatusOr<std::unique_ptr<Scorer>> CreateScorer(const ScorerConfig& config);

// CreateScorer's checks of the window, kernel and pooling alone (no files are opened): what a
// profile can check before any scorer is built. NotFound for an unknown name.
absl::Status CheckScorerShape(const ScorerConfig& config);

// The registry's method names, sorted.
std::vector<std::string> KnownScorers();

// Whether `method` is a learned gate, built from ScorerConfig::weights_path (false for unknown).
bool TakesWeights(std::string_view method);

// A scorer's default observation window and pooling kernel. window 0: the scorer has no window
// (LookaheadKV may be given one, read beside its rows; the others may not); kernel 0: it takes no
// kernel or pooling either. A windowless scorer with kernel >= 1
// (LookaheadKV, the learned gates, H2O, Expected Attention) may have its scores pooled
// (NewPooledScorer; its default, 1, pools nothing). The pooling default is avg. NotFound for an
// unknown name.
struct WindowDefaults {
  int64_t window = 0;
  int64_t kernel = 0;
  bool window_optional = false;  // window 0, yet a window may be given (LookaheadKV)
};
absl::StatusOr<WindowDefaults> ScorerWindowDefaults(std::string_view method);

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
// CAKE (cake.cc): τ1, τ2 are the preference exponents, γ the variance weight.
std::unique_ptr<Scorer> NewCakeScorer(int64_t window, int64_t kernel, Pooling pooling,
                                      double tau1 = 1.0, double tau2 = 1.0, double gamma = 200.0);
// Learned gates, loading their weights (errors name the file and the tensor).
absl::StatusOr<std::unique_ptr<Scorer>> NewKvzipGateScorer(const std::string& weights_path);
absl::StatusOr<std::unique_ptr<Scorer>> NewTrimKvGateScorer(const std::string& weights_path);
absl::StatusOr<std::unique_ptr<Scorer>> NewRetentionGlobalScorer(const std::string& weights_path);
// ForesightKV (foresight.cc), loading its per-head MLPs.
absl::StatusOr<std::unique_ptr<Scorer>> NewForesightScorer(const std::string& weights_path);
// LookaheadKV (lookahead_scorer.cc), loading its module (errors name the file and the tensor).
// window > 0 adds the prompt's last `window` queries to the rows' attention (window 0: rows only).
absl::StatusOr<std::unique_ptr<Scorer>> NewLookaheadScorer(const std::string& module_path,
                                                           int64_t window);
// `inner`'s scores [Hkv, T] pooled along the key axis, each kv-head's row with Pool1d
// (pooled_scorer.cc); everything else is `inner`'s. For scorers without a window (those with one
// pool their window attention themselves); kernel odd and > 1.
std::unique_ptr<Scorer> NewPooledScorer(std::unique_ptr<Scorer> inner, int64_t kernel,
                                        Pooling pooling);

}  // namespace glimpse::eviction

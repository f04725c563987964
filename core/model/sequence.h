// One sequence being run through a Model: its ragged KV cache, the next position, and scratch
// buffers. Forward() appends tokens (prefill in chunks, or one decode token) and returns logits.
//
// Prompt longer than the context, token ids out of range: InvalidArgument with the values; a KV
// pool too full for the call's entries: ResourceExhausted; the sequence is unchanged in every case.
// Not thread-safe; the ThreadPool may be shared by sequences used one at a time.
//
// A LayerObserver passed to Forward() sees every layer's attention activations of every chunk
// (eviction captures what its scorers need this way, core/eviction/pipeline.h); without one the
// forward pass does no extra work.
//
// ForwardEmbeddings() runs rows given as input embeddings instead of token ids, optionally with a
// low-rank adapter (LoRA) on every projection of some rows of that call, and optionally without
// keeping the appended entries: LookaheadKV's second pass over a prompt's cache
// (core/eviction/lookahead_pass.h) is one such call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/kv_cache.h"
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::model {

class ForwardPass;  // forward_pass.h

// One layer's attention activations for the current chunk of n tokens, all fp32 and row-major.
// The pointers are valid only during LayerObserver::OnLayer.
struct LayerActivations {
  int64_t n_tokens = 0;                // n
  const int32_t* positions = nullptr;  // [n] token positions
  const float* xn = nullptr;           // [n, D] attention input (after attn_norm)
  const float* pre_rope_q = nullptr;   // [n, H, hd] after bias / q_norm, before RoPE; nullptr
                                       //   unless the observer wants_pre_rope_queries()
  const float* q = nullptr;            // [n, H, hd] post-RoPE queries
  const float* k = nullptr;            // [n, Hkv, hd] post-RoPE keys
  const float* v = nullptr;            // [n, Hkv, hd] values
};

// Called once per (chunk, layer), after the chunk's K/V were appended to the layer's cache and
// attention ran, before the output projection. OnLayer runs on the thread that called Forward();
// it may read sequence.cache() and run loops on sequence.pool(), but must not call Forward/Reset.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  // True to receive pre_rope_q (costs one copy of q per layer and chunk).
  virtual bool wants_pre_rope_queries() const { return false; }
  virtual void OnLayer(int32_t layer, const LayerActivations& activations) = 0;
};

// A LoRA adapter for one call (PEFT convention): a projection y = W x of an adapted row becomes
// y = W x + scale · B (A x). The views point into memory the caller owns for the whole call.
struct LoraPair {
  kernels::WeightView a;  // [r, in]
  kernels::WeightView b;  // [out, r]
};

struct LoraLayer {
  LoraPair q, k, v, o;      // attention projections; in/out as LayerWeights' wq, wk, wv, wo
  LoraPair gate, up, down;  // feed-forward projections; as w_gate, w_up, w_down
};

struct LoraAdapter {
  float scale = 1.0f;             // α / r
  std::vector<LoraLayer> layers;  // one per model layer
};

struct EmbeddingsCall {
  const LoraAdapter* lora = nullptr;  // not owned; nullptr = no adapter
  int64_t lora_first_row = 0;         // rows [lora_first_row, n) of the call are adapted
  bool keep_entries = true;           // false: the call's K/V leave the cache when it returns
  bool all_logits = false;            // as Forward()
  LayerObserver* observer = nullptr;  // as Forward()
};

struct SequenceOptions {
  int32_t max_context = 0;      // 0 = the model's context length
  int32_t prefill_chunk = 256;  // tokens per prefill step (bounds scratch memory)
  // Where the KV cache's pages live and in which format (kv_cache.h); nullptr: a private
  // unbounded pool, fp32.
  KvPool* kv_pool = nullptr;
  kernels::KvDType kv_dtype = kernels::KvDType::kF32;
};

class Sequence {
 public:
  Sequence(const Model& model, kernels::ThreadPool& pool, SequenceOptions options = {});
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Runs `tokens` at positions next_position() … and appends their K/V to the cache. Returns the
  // logits of the last token, [vocab]. With `all_logits`, returns [tokens.size(), vocab].
  // `observer` (may be null, not owned) sees each layer of each chunk.
  absl::StatusOr<std::vector<float>> Forward(std::span<const int32_t> tokens,
                                             bool all_logits = false,
                                             LayerObserver* observer = nullptr);

  // Runs n = embeddings.size() / D rows, embeddings [n, D] (fp32, the residual stream's input in
  // place of the token-embedding lookup), at positions next_position() … next_position() + n − 1.
  // With call.keep_entries, the rows' K/V stay in the cache and the position advances as with
  // Forward(); without, each row attends to the cache and the call's earlier rows (causally) as
  // usual, and afterwards cache and position are as before the call. InvalidArgument (sequence
  // unchanged) when the size is not a positive multiple of D, the rows exceed the context, or the
  // adapter's layer count or shapes do not match the model.
  absl::StatusOr<std::vector<float>> ForwardEmbeddings(std::span<const float> embeddings,
                                                       const EmbeddingsCall& call = {});

  int32_t next_position() const { return next_position_; }
  int32_t max_context() const { return max_context_; }
  const Model& model() const { return model_; }
  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }
  // RoPE inverse frequencies [head_dim / 2] (θ_i = pos · inv_freq[i]); the style is
  // model().config().rope_style.
  std::span<const float> rope_inv_freq() const { return inv_freq_; }
  kernels::ThreadPool& pool() const { return pool_; }
  // Forgets everything (cache and position).
  void Reset();
  // Continues at `next_position` over whatever cache() holds now, e.g. a history state a caller
  // loaded from stored pages (core/kvstate/cache_pages.h). InvalidArgument (nothing changes) when
  // the position is outside [0, max_context()] or an entry sits at or after it.
  absl::Status Resume(int32_t next_position);

 private:
  friend class ForwardPass;
  absl::Status ValidateLength(int64_t n) const;
  absl::Status ValidateTokens(std::span<const int32_t> tokens) const;
  absl::Status ValidateLora(const LoraAdapter& lora) const;
  // Entries per head, to undo a call.
  std::vector<int64_t> HeadSizes() const;
  // Drops the entries past `sizes[layer · Hkv + h]` from every head and rewinds the position.
  void Truncate(const std::vector<int64_t>& sizes, int32_t position);

  const Model& model_;
  kernels::ThreadPool& pool_;
  const SequenceOptions options_;
  const int32_t max_context_;
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE inverse frequencies
  KvCache cache_;
  std::unique_ptr<ForwardPass> pass_;  // this sequence's own calls
  int32_t next_position_ = 0;
};

}  // namespace glimpse::model

// One sequence being run through a Model: its ragged KV cache, the next position, and scratch
// buffers. Forward() appends tokens (prefill in chunks, or one decode token) and returns logits.
//
// Prompt longer than the context, token ids out of range: InvalidArgument with the values; the
// session is unchanged. Not thread-safe; the ThreadPool may be shared by sessions used one at a
// time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/kv_cache.h"
#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::model {

struct SessionOptions {
  int32_t max_context = 0;      // 0 = the model's context length
  int32_t prefill_chunk = 256;  // tokens per prefill step (bounds scratch memory)
};

class Session {
 public:
  Session(const Model& model, kernels::ThreadPool& pool, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs `tokens` at positions next_position() … and appends their K/V to the cache. Returns the
  // logits of the last token, [vocab]. With `all_logits`, returns [tokens.size(), vocab].
  absl::StatusOr<std::vector<float>> Forward(std::span<const int32_t> tokens,
                                             bool all_logits = false);

  int32_t next_position() const { return next_position_; }
  int32_t max_context() const { return max_context_; }
  const Model& model() const { return model_; }
  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }
  // Forgets everything (cache and position).
  void Reset();

 private:
  struct Scratch;
  absl::Status ValidateTokens(std::span<const int32_t> tokens) const;
  // Runs one chunk; writes its logits (last row, or every row) to `logits`.
  void ForwardChunk(std::span<const int32_t> tokens, bool all_logits, float* logits);
  void Embed(std::span<const int32_t> tokens);
  void AttentionBlock(int32_t layer, int64_t n);
  void FeedForwardBlock(int32_t layer, int64_t n);
  void Attend(int32_t layer, int64_t n);
  void Logits(int64_t n, bool all_logits, float* logits);

  const Model& model_;
  kernels::ThreadPool& pool_;
  const SessionOptions options_;
  const int32_t max_context_;
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE inverse frequencies
  KvCache cache_;
  std::unique_ptr<Scratch> scratch_;
  int32_t next_position_ = 0;
};

}  // namespace glimpse::model

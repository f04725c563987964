// One forward pass over rows of many sequences (continuous batching): every sequence contributes
// its next rows — a decode token, a chunk of a prefill, or input embeddings (LookaheadKV's pass) —
// and the pass reads every weight matrix once for all of them; attention runs per sequence over the
// entries its own cache holds, each row at its own sequence's positions. Sampling, stopping and
// streaming stay with the caller, per sequence.
//
// What a sequence's rows compute does not depend on the other rows of the pass: every kernel works
// row by row, except the linear layers, which with more than kernels' dot-product threshold of rows
// in the pass use a blocked fp32 product whose summation order differs (results then agree to fp32
// rounding, not bit for bit).
//
// Errors are all or nothing: a bad token id, rows past a sequence's context, an adapter that does
// not fit the model (InvalidArgument), or a KV pool too full for the pass's entries
// (ResourceExhausted) leave every sequence as it was. Not thread-safe; one pass at a time per
// ForwardPass and per ThreadPool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/sequence.h"

namespace glimpse::model {

// One sequence's rows in a pass: token ids, or input embeddings [n, D] (exactly one of the two is
// non-empty), with the options of Sequence::ForwardEmbeddings.
struct BatchRows {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;
  std::span<const float> embeddings;
  EmbeddingsCall call;
};

// Per item, the logits a pass returns (ForwardPass::Run).
using PassOutputs = std::vector<std::vector<float>>;
// Runs rows in one forward pass.
using RunRows = std::function<absl::StatusOr<PassOutputs>(std::span<const BatchRows>)>;

class ForwardPass {
 public:
  ForwardPass(const Model& model, kernels::ThreadPool& pool);
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  // Runs every item's rows; returns per item the logits of its last row ([vocab]), or of every row
  // ([n, vocab]) with call.all_logits. Each sequence then continues after its rows (or, without
  // call.keep_entries, is as before). Sequences must be distinct and of this pass's model.
  absl::StatusOr<PassOutputs> Run(std::span<const BatchRows> items);

 private:
  struct Scratch;
  struct Item;
  absl::Status Check(std::span<const BatchRows> items) const;
  void Embed(std::span<const Item> items);
  absl::Status AttentionBlock(int32_t layer, std::span<const Item> items);
  absl::Status Attend(int32_t layer, std::span<const Item> items);
  void FeedForwardBlock(int32_t layer, std::span<const Item> items);
  void AddLora(float* out, const float* x, const LoraPair LoraLayer::*pair, int32_t layer,
               std::span<const Item> items);
  void Logits(std::span<const Item> items, PassOutputs& out);

  const Model& model_;
  kernels::ThreadPool& pool_;
  std::unique_ptr<Scratch> scratch_;
};

// How every prefill chunk on this thread runs while the scope lives: Sequence::Forward and
// ForwardEmbeddings hand each chunk's rows to the hook with `run` (one forward pass over whatever
// rows it is given). The hook returns what run(chunk) would — the chunk's outputs, its sequences
// left as run(chunk) leaves them, or its error with them unchanged — and may do more in the same
// pass or around it: a worker's engine adds the next token of every running decode to the chunk's
// pass, so the decodes go on during a long prompt and every weight is read once for both
// (continuous batching); a prefill worker lets the turns that wait compute after each chunk.
// Scopes nest (the innermost one is used); chunks the hook itself causes run plainly.
class ChunkHook {
 public:
  using Fn = std::function<absl::StatusOr<PassOutputs>(std::span<const BatchRows> chunk,
                                                       const RunRows& run)>;
  explicit ChunkHook(Fn fn);
  ~ChunkHook();
  ChunkHook(const ChunkHook&) = delete;
  ChunkHook& operator=(const ChunkHook&) = delete;

  // Runs `chunk` through the current thread's hook, or run(chunk) when there is none.
  static absl::StatusOr<PassOutputs> Run(std::span<const BatchRows> chunk, const RunRows& run);

 private:
  Fn fn_;
  ChunkHook* outer_;
};

}  // namespace glimpse::model

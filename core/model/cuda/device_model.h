// The model runtime on an NVIDIA GPU (kernels/cuda): a Model's weights uploaded once per device,
// sequences whose KV caches live in device memory, and forward passes that run there.
//
// The arithmetic is core/model's ForwardPass with two deliberate roundings: weights are decoded to
// fp16 once at upload and activations are rounded to fp16 at each matrix product (cuBLAS
// accumulates in fp32), and K/V are held as fp16. Norms, RoPE, softmax and residuals stay fp32.
// So logits agree with the CPU path and with transformers' fp32 to those roundings, not bit for
// bit (tests/cuda_model_test.cc states the tolerance and measures it).
//
// Scope: prefill chunks of one sequence and one-token decode steps of many sequences in one pass
// (every weight read once per step). Not yet on the device: eviction and scoring hooks, LoRA,
// layer observers, KV codecs other than fp16, and the worker's page pool; the CPU runtime keeps
// those until the device path is wired into the workers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model.h"
#include "kernels/attention.h"

namespace glimpse::model::cuda {

// A model's weights on the current device: every matrix decoded to fp16 (a tied output matrix
// shares the embedding's copy), norm vectors and biases fp32. Immutable after Upload; thread-safe.
class DeviceModel {
 public:
  // FailedPrecondition without a CUDA device; ResourceExhausted when device memory runs out.
  // `model` must outlive the result.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Upload(const Model& model);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const Model& model() const { return model_; }
  // Bytes of device memory the weights take.
  int64_t weight_bytes() const { return weight_bytes_; }

 private:
  friend class DeviceRunner;
  struct Weights;
  explicit DeviceModel(const Model& model);

  const Model& model_;
  std::unique_ptr<Weights> weights_;
  int64_t weight_bytes_ = 0;
};

// One sequence's KV cache in device memory: per layer, K and V as [kv_heads, capacity, head_dim]
// (kernels/cuda/kv_cache.h), fp16 or int8 with a scale per row (core/kvpage's int8 codec, half
// the bytes: decode reads the int8 pages as they are, prefill through an fp16 copy of the layer),
// entry i at position i. Not thread-safe.
class DeviceSequence {
 public:
  // ResourceExhausted when device memory runs out; InvalidArgument for capacity < 1 or a format
  // other than fp16 and int8.
  static absl::StatusOr<std::unique_ptr<DeviceSequence>> Create(
      const DeviceModel& model, int64_t capacity,
      kernels::KvDType kv_dtype = kernels::KvDType::kF16);
  ~DeviceSequence();
  DeviceSequence(const DeviceSequence&) = delete;
  DeviceSequence& operator=(const DeviceSequence&) = delete;

  // Entries cached, which is also the next token's position.
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  kernels::KvDType kv_dtype() const;

 private:
  friend class DeviceRunner;
  struct Cache;
  DeviceSequence(const DeviceModel& model, int64_t capacity);

  const DeviceModel& model_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::unique_ptr<Cache> cache_;
};

// Forward passes on one CUDA stream of its own. Not thread-safe: one pass at a time per runner.
//
// Errors: InvalidArgument (no tokens, a token outside the vocabulary, a sequence of another model,
// the same sequence twice in one step) and ResourceExhausted (past a sequence's capacity, device
// memory) leave every sequence as it was. Internal reports a failed kernel or copy; the sequences
// of that pass then keep their length and their caches past it are rewritten by the next pass.
class DeviceRunner {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceRunner>> Create(const DeviceModel& model);
  ~DeviceRunner();
  const DeviceModel& model() const { return model_; }
  DeviceRunner(const DeviceRunner&) = delete;
  DeviceRunner& operator=(const DeviceRunner&) = delete;

  // Appends `tokens` to `seq`; returns the logits of the last row ([vocab]) or, with
  // `all_logits`, of every row ([n, vocab]).
  absl::StatusOr<std::vector<float>> Prefill(DeviceSequence& seq, std::span<const int32_t> tokens,
                                             bool all_logits = false);

  // One token for each sequence in one pass; returns [n, vocab] logits, row i sequence i's. What
  // a sequence's row computes does not depend on the others in the step beyond the summation
  // order cuBLAS picks for the step's row count.
  absl::StatusOr<std::vector<float>> Decode(std::span<DeviceSequence* const> seqs,
                                            std::span<const int32_t> tokens);

 private:
  struct Scratch;
  explicit DeviceRunner(const DeviceModel& model);
  absl::Status Embed(std::span<const int32_t> tokens);
  // Every layer over the m rows in scratch, at positions `pos` (device, [m]); `attend(layer)`
  // stores the rows' keys and values and fills the attention output from q, k and v.
  absl::Status Layers(int64_t m, const int32_t* pos,
                      const std::function<absl::Status(int32_t)>& attend);
  // The logits of rows [first, first + rows), copied to the host.
  absl::StatusOr<std::vector<float>> Logits(int64_t first, int64_t rows);

  const DeviceModel& model_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace glimpse::model::cuda

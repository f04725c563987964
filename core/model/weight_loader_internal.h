// Pieces shared by the GGUF and safetensors weight loaders (weight_loader.cc,
// weight_loader_safetensors.cc); not part of the public API.
//
// Both loaders describe each stored tensor as a TensorRef in PyTorch order (outermost dimension
// first, so a Linear weight is [rows, cols]); a Binder looks tensors up by name, checks their
// shapes and turns them into the views ModelWeights holds, recording each bound tensor for the
// fingerprint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/weights.h"
#include "kernels/quant.h"

namespace glimpse::model::internal {

struct TensorRef {
  std::string name;
  kernels::DType type = kernels::DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// The WeightSource both loaders return: the ModelWeights, the files that back it (kept alive by
// `backing`), and owned copies of tensors that had to be converted or realigned.
class LoadedWeights : public WeightSource {
 public:
  const ModelWeights& weights() const override { return weights_; }
  std::string fingerprint() const override;
  const GgufFile* gguf() const override { return gguf_; }

  ModelWeights weights_;
  const GgufFile* gguf_ = nullptr;             // points into `backing` when loaded from GGUF
  std::vector<std::shared_ptr<void>> backing;  // GgufFile / SafetensorsFile objects
  std::vector<std::unique_ptr<float[]>> owned_floats;
  std::vector<std::unique_ptr<uint64_t[]>> owned_bytes;  // 8-byte aligned realigned matrices
  std::vector<float> rope_freq_factors;                  // computed (HF Llama-3 scaling)
  std::vector<TensorRef> bound;                          // every tensor ModelWeights uses

 private:
  mutable std::once_flag fingerprint_once_;
  mutable std::string fingerprint_;
};

class Binder {
 public:
  // Maps a GGUF tensor name to the container's name for it (identity for GGUF).
  using Rename = std::function<std::string(std::string_view gguf_name)>;
  // The container's tensor of that name, or nullptr.
  using Lookup = std::function<const TensorRef*(std::string_view name)>;
  using Progress = std::function<void()>;

  Binder(Rename rename, Lookup lookup, LoadedWeights* out, Progress on_bound)
      : rename_(std::move(rename)),
        lookup_(std::move(lookup)),
        out_(out),
        on_bound_(std::move(on_bound)) {}

  // `name` is always the GGUF name; errors use the container's name for it.
  // A [rows, cols] weight in its stored type. Missing → InvalidArgument naming the tensor (or an
  // empty view when `optional`); wrong shape → InvalidArgument naming expected and actual shape.
  absl::StatusOr<kernels::WeightView> Matrix(const std::string& name, int64_t rows, int64_t cols,
                                             bool optional = false);
  // A [n] vector as fp32 (converted from F16/BF16/quantised storage into an owned copy);
  // nullptr when `optional` and absent.
  absl::StatusOr<const float*> Vector(const std::string& name, int64_t n, bool optional = false);

 private:
  absl::StatusOr<const TensorRef*> Find(const std::string& name, const std::vector<int64_t>& shape,
                                        bool optional);

  Rename rename_;
  Lookup lookup_;
  LoadedWeights* out_;
  Progress on_bound_;
};

// Binds token_embd, output_norm, output (tied when absent) and every layer by their GGUF names,
// using out->weights_.config for shapes (vocab_size is taken from token_embd). Requires the
// q/k/v biases when config.qkv_bias and the q/k norms when config.qk_norm.
absl::Status BindModel(Binder& binder, LoadedWeights* out);

// Checks the hyper-parameters shared by both formats (positive, heads divisible, even head_dim).
absl::Status ValidateConfig(const ModelConfig& c);

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace glimpse::model::internal

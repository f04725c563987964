// Loading of learned eviction-gate weights (Fast KVzip, TRIM-KV, the global retention projection)
// from a .safetensors file, and the small fp32 ops those gates share.
//
// GateTensors opens a file through model::SafetensorsFile (which validates the header, dtypes and
// byte ranges) and hands out fp32 copies of named tensors after checking their shapes. Every
// error names the file and the tensor, and states the expected and actual shape. F32, F16 and BF16
// tensors are accepted; values must be finite. The objects are immutable after loading and
// thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/safetensors.h"

namespace glimpse::eviction {

// One tensor converted to fp32, row-major, with its shape (outermost first).
struct GateTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t dim(int i) const { return shape[i]; }
};

class GateTensors {
 public:
  // NotFound / InvalidArgument from the safetensors reader, prefixed with `who` and the path.
  static absl::StatusOr<std::unique_ptr<GateTensors>> Open(const std::string& path,
                                                           const std::string& who);
  // Same, from bytes in memory (tests).
  static absl::StatusOr<std::unique_ptr<GateTensors>> Parse(const std::string& bytes,
                                                            const std::string& who);

  // The tensor `name` as fp32. `shape` lists the expected dims; -1 accepts any size there (the
  // rank must still match). NotFound / InvalidArgument naming the tensor otherwise.
  absl::StatusOr<GateTensor> Get(const std::string& name, const std::vector<int64_t>& shape) const;

  // The number L of consecutive layers 0, 1, …, L − 1 for which `prefix` + l + `suffix` exists
  // (e.g. "layers." + l + ".q_proj.weight"). InvalidArgument, naming the tensor, when there is
  // none or when a tensor for layer >= L exists (a gap).
  absl::StatusOr<int32_t> CountLayers(const std::string& prefix, const std::string& suffix) const;

  const std::string& source() const { return source_; }

 private:
  GateTensors(std::unique_ptr<model::SafetensorsFile> file, std::string who, std::string source)
      : file_(std::move(file)), who_(std::move(who)), source_(std::move(source)) {}

  std::unique_ptr<model::SafetensorsFile> file_;
  std::string who_;     // scorer name, for messages
  std::string source_;  // the path, or "<memory>"
};

// out[r] = Σ_c w[r, c]·x[c] (+ bias[r] when bias is non-null); w: [rows, cols].
void GateMatVec(float* out, const float* w, const float* bias, const float* x, int64_t rows,
                int64_t cols);

// out[m, rows] = x[m, cols] · w[rows, cols]ᵀ (+ bias[rows] on every row when non-null), BLAS sgemm.
void GateMatMul(float* out, const float* x, const float* w, const float* bias, int64_t m,
                int64_t rows, int64_t cols);

// x[n] ← x / √(mean(x²) + eps) · weight[n]   (Qwen3RMSNorm, fp32).
void GateRmsNorm(float* x, const float* weight, int64_t n, float eps);

// log σ(z) = −softplus(−z), stable for large |z| (F.logsigmoid).
float LogSigmoid(float z);

// z·σ(z) (SiLU, the "silu" of Hugging Face's ACT2FN).
float Silu(float z);

}  // namespace glimpse::eviction

#include "core/eviction/gate_weights.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/quant.h"

namespace glimpse::eviction {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::vector<std::string> dims;
  for (int64_t d : shape) dims.push_back(d < 0 ? "*" : absl::StrCat(d));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::Status Prefixed(const absl::Status& status, const std::string& who,
                      const std::string& source) {
  return absl::Status(status.code(),
                      absl::StrCat(who, ": weights ", source, ": ", std::string(status.message())));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GateTensors>> GateTensors::Open(const std::string& path,
                                                               const std::string& who) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": needs a weights file (ScorerConfig.weights_path, --weights)"));
  }
  absl::StatusOr<std::unique_ptr<model::SafetensorsFile>> file = model::SafetensorsFile::Open(path);
  if (!file.ok()) return Prefixed(file.status(), who, path);
  return std::unique_ptr<GateTensors>(new GateTensors(std::move(*file), who, path));
}

absl::StatusOr<std::unique_ptr<GateTensors>> GateTensors::Parse(const std::string& bytes,
                                                                const std::string& who) {
  absl::StatusOr<std::unique_ptr<model::SafetensorsFile>> file =
      model::SafetensorsFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!file.ok()) return Prefixed(file.status(), who, "<memory>");
  return std::unique_ptr<GateTensors>(new GateTensors(std::move(*file), who, "<memory>"));
}

absl::StatusOr<GateTensor> GateTensors::Get(const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  const model::SafetensorsTensor* t = file_->FindTensor(name);
  const std::string where = absl::StrCat(who_, ": weights ", source_, ": tensor '", name, "'");
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(where, " is missing"));
  bool match = t->shape.size() == shape.size();
  for (size_t i = 0; match && i < shape.size(); ++i) {
    match = shape[i] < 0 || shape[i] == t->shape[i];
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has shape ", ShapeString(t->shape),
                                                   ", expected ", ShapeString(shape)));
  }
  GateTensor out;
  out.shape = t->shape;
  int64_t n = 1;
  for (int64_t d : t->shape) n *= d;
  out.data.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    if (t->type == kernels::DType::kF32) {
      std::memcpy(&out.data[i], static_cast<const char*>(t->data) + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(t->data) + 2 * i, 2);
      out.data[i] =
          t->type == kernels::DType::kF16 ? kernels::Fp16ToFp32(h) : kernels::Bf16ToFp32(h);
    }
    if (!std::isfinite(out.data[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " holds a non-finite value at flat index ", i));
    }
  }
  return out;
}

absl::StatusOr<int32_t> GateTensors::CountLayers(const std::string& prefix,
                                                 const std::string& suffix) const {
  int32_t n = 0;
  while (file_->FindTensor(absl::StrCat(prefix, n, suffix)) != nullptr) ++n;
  if (n == 0) {
    return absl::NotFoundError(absl::StrCat(who_, ": weights ", source_, ": tensor '", prefix, 0,
                                            suffix, "' is missing (no layers)"));
  }
  for (const model::SafetensorsTensor& t : file_->tensors()) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    const std::string rest = t.name.substr(prefix.size());
    const size_t dot = rest.find('.');
    const std::string index = rest.substr(0, dot);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) continue;
    if (index.size() > 9 || std::stol(index) >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          who_, ": weights ", source_, ": tensor '", t.name, "' belongs to layer ", index,
          " but layers stop at ", n - 1, " ('", prefix, n, suffix, "' is missing)"));
    }
  }
  return n;
}

void GateMatVec(float* out, const float* w, const float* bias, const float* x, int64_t rows,
                int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += row[c] * x[c];
    out[r] = bias != nullptr ? acc + bias[r] : acc;
  }
}

void GateMatMul(float* out, const float* x, const float* w, const float* bias, int64_t m,
                int64_t rows, int64_t cols) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
              static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), w, static_cast<int>(cols),
              0.0f, out, static_cast<int>(rows));
  if (bias == nullptr) return;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) out[i * rows + r] += bias[r];
  }
}

void GateRmsNorm(float* x, const float* weight, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * weight[i];
}

float LogSigmoid(float z) { return std::min(z, 0.0f) - std::log1p(std::exp(-std::fabs(z))); }

float Silu(float z) { return z / (1.0f + std::exp(-z)); }

}  // namespace glimpse::eviction

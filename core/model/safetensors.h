// A validated, read-only view of a Hugging Face .safetensors file (8-byte little-endian header
// length, JSON header, raw data). Validates the header JSON, dtypes (F32, F16, BF16), shapes
// (no overflow), and that every tensor's [begin, end) lies inside the data section with a size
// matching its shape. Errors name the tensor. The object owns the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant.h"

namespace glimpse::model {

struct SafetensorsTensor {
  std::string name;
  kernels::DType type;         // kF32, kF16 or kBF16
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch order)
  const void* data = nullptr;
  uint64_t bytes = 0;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const uint8_t* data, size_t size);
  ~SafetensorsFile();

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* FindTensor(std::string_view name) const;  // nullptr when absent
  // The "__metadata__" string map (may be empty).
  const std::unordered_map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  struct Mapping;

  // Parses and validates mapping_ into the members below.
  absl::Status Init();

  std::unique_ptr<Mapping> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::unordered_map<std::string, std::string> metadata_;
};

}  // namespace glimpse::model

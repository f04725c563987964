// A validated, read-only view of a GGUF file (versions 2 and 3).
//
// Open() maps the file and validates everything before returning: magic, version, every count,
// string length, array length, metadata type, tensor type (only kernels::DType types), tensor rank
// (1..4), dimensions (positive, no overflow), alignment, and that each tensor's data lies inside
// the file and does not overlap another. A truncated, corrupt or hostile file yields an
// InvalidArgument / DataLoss status naming the offending key, tensor or offset — never a crash.
//
// The returned object owns the mapping; GgufTensor::data points into it and stays valid for the
// object's lifetime. Thread-safe for concurrent reads after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant.h"

namespace glimpse::model {

// GGUF metadata value. Arrays of strings and of numbers are kept; nested arrays are rejected.
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string,
                               std::vector<std::string>, std::vector<int64_t>, std::vector<double>>;

struct GgufTensor {
  std::string name;
  kernels::DType type;
  // GGML order: dims[0] is the innermost (contiguous) dimension. A 2-D weight has
  // dims = {cols, rows}.
  std::vector<int64_t> dims;
  const void* data = nullptr;
  uint64_t bytes = 0;
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (copied); used by tests and the fuzzer.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size);
  ~GgufFile();

  uint32_t version() const { return version_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;  // nullptr when absent
  bool HasKey(std::string_view key) const;

  // Typed metadata accessors: NotFound when absent, InvalidArgument (naming the key and the
  // stored type) when the type does not fit. Integer accessors accept any integer type whose
  // value fits.
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // accepts integers too
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;

 private:
  GgufFile() = default;
  struct Mapping;

  // Parses and validates mapping_ into the members below.
  absl::Status Init();
  const GgufValue* Find(std::string_view key) const;  // nullptr when absent

  std::unique_ptr<Mapping> mapping_;
  uint32_t version_ = 0;
  std::unordered_map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace glimpse::model

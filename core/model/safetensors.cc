// Safetensors layout (huggingface/safetensors, docs "Format"): u64 little-endian N, N bytes of
// UTF-8 JSON {"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data section; offsets are relative to its start.
// The JSON is parsed without exceptions and every field's type is checked before it is read, so
// a hostile header yields a status rather than a throw.
#include "core/model/safetensors.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/model/mapped_file.h"
#include "nlohmann/json.hpp"

namespace glimpse::model {

struct SafetensorsFile::Mapping {
  std::unique_ptr<MappedFile> file;
};

namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

absl::StatusOr<kernels::DType> ParseDType(const std::string& dtype) {
  if (dtype == "F32") return kernels::DType::kF32;
  if (dtype == "F16") return kernels::DType::kF16;
  if (dtype == "BF16") return kernels::DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", dtype, "' (supported: F32, F16, BF16)"));
}

uint64_t ElemBytes(kernels::DType type) { return type == kernels::DType::kF32 ? 4 : 2; }

// Reads an array of non-negative integers; `what` names the field in errors.
absl::StatusOr<std::vector<uint64_t>> UintArray(const Json& j, const char* what) {
  if (!j.is_array()) return absl::InvalidArgumentError(absl::StrCat(what, " is not an array"));
  std::vector<uint64_t> out;
  out.reserve(j.size());
  for (const Json& e : j) {
    if (!e.is_number_unsigned()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " holds ", e.dump(-1, ' ', false, Json::error_handler_t::replace),
                       ", expected a non-negative integer"));
    }
    out.push_back(e.get<uint64_t>());
  }
  return out;
}

struct Entry {
  SafetensorsTensor tensor;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& j, uint64_t data_size) {
  if (!j.is_object()) return absl::InvalidArgumentError("entry is not an object");
  auto dtype_it = j.find("dtype");
  auto shape_it = j.find("shape");
  auto offsets_it = j.find("data_offsets");
  if (dtype_it == j.end() || shape_it == j.end() || offsets_it == j.end()) {
    return absl::InvalidArgumentError("entry lacks one of dtype, shape, data_offsets");
  }
  if (!dtype_it->is_string()) return absl::InvalidArgumentError("dtype is not a string");
  Entry e;
  e.tensor.name = name;
  ASSIGN_OR_RETURN(e.tensor.type, ParseDType(dtype_it->get_ref<const std::string&>()));
  ASSIGN_OR_RETURN(std::vector<uint64_t> shape, UintArray(*shape_it, "shape"));
  ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, UintArray(*offsets_it, "data_offsets"));
  if (offsets.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets has %d elements, expected 2", offsets.size()));
  }
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.begin > e.end || e.end > data_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets [%d, %d) do not lie inside the %d-byte data section", e.begin,
                        e.end, data_size));
  }
  // A scalar (empty shape) holds one element; a zero dimension holds none.
  uint64_t bytes = ElemBytes(e.tensor.type);
  for (uint64_t d : shape) {
    if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, d, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] overflows"));
    }
    e.tensor.shape.push_back(static_cast<int64_t>(d));
  }
  if (bytes != e.end - e.begin) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shape [%s] of %s needs %d bytes but data_offsets [%d, %d) span %d",
                        absl::StrJoin(shape, ", "), kernels::DTypeName(e.tensor.type), bytes,
                        e.begin, e.end, e.end - e.begin));
  }
  e.tensor.bytes = bytes;
  return e;
}

absl::Status ParseMetadata(const Json& j, std::unordered_map<std::string, std::string>* out) {
  if (!j.is_object()) return absl::InvalidArgumentError("__metadata__ is not an object");
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("__metadata__ key '", key, "' is not a string"));
    }
    (*out)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    const Entry& prev = entries[i - 1];
    const Entry& next = entries[i];
    if (prev.end > next.begin) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensors '%s' [%d, %d) and '%s' [%d, %d) overlap", prev.tensor.name,
                          prev.begin, prev.end, next.tensor.name, next.begin, next.end));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  st->mapping_ = std::make_unique<Mapping>();
  st->mapping_->file = std::move(file);
  absl::Status s = st->Init();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return st;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(const uint8_t* data,
                                                                        size_t size) {
  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  st->mapping_ = std::make_unique<Mapping>();
  st->mapping_->file = MappedFile::Copy(data, size);
  RETURN_IF_ERROR(st->Init());
  return st;
}

SafetensorsFile::~SafetensorsFile() = default;

absl::Status SafetensorsFile::Init() {
  const uint8_t* base = mapping_->file->data();
  const uint64_t size = mapping_->file->size();
  uint64_t header_len = 0;
  if (size < sizeof(header_len)) {
    return absl::DataLossError(
        absl::StrFormat("file of %d bytes is too short for the 8-byte header length", size));
  }
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
  if (header_len > size - 8 || header_len > kMaxHeaderBytes) {
    return absl::DataLossError(
        absl::StrFormat("header length %d exceeds the %d bytes after it (or the %d-byte limit)",
                        header_len, size - 8, kMaxHeaderBytes));
  }
  const char* json_begin = reinterpret_cast<const char*>(base + 8);
  Json header =
      Json::parse(json_begin, json_begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError("header is not a valid JSON object");
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(value, &metadata_));
      continue;
    }
    absl::StatusOr<Entry> e = ParseEntry(name, value, data_size);
    if (!e.ok()) {
      return absl::Status(e.status().code(),
                          absl::StrCat("tensor '", name, "': ", e.status().message()));
    }
    e->tensor.data = data + e->begin;
    entries.push_back(*std::move(e));
  }
  RETURN_IF_ERROR(CheckNoOverlap(entries));
  for (Entry& e : entries) {
    tensor_index_.emplace(e.tensor.name, tensors_.size());
    tensors_.push_back(std::move(e.tensor));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace glimpse::model

// Typed access to GGUF metadata (the accessors declared in gguf.h); parsing is in gguf.cc.
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/model/gguf.h"  // IWYU pragma: associated

namespace glimpse::model {

bool GgufFile::HasKey(std::string_view key) const {
  return metadata_.find(std::string(key)) != metadata_.end();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

const char* ValueKindName(const GgufValue& v) {
  static constexpr const char* kNames[] = {
      "unsigned integer", "signed integer", "float",         "bool",
      "string",           "string array",   "integer array", "float array"};
  return kNames[v.index()];
}

absl::Status NotFound(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("metadata key '", std::string(key), "' not found"));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, std::string_view wanted) {
  return absl::InvalidArgumentError(absl::StrCat("metadata key '", std::string(key), "' holds a ",
                                                 ValueKindName(v), ", expected ",
                                                 std::string(wanted)));
}

}  // namespace

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* u = std::get_if<uint64_t>(v)) return *u;
  if (auto* i = std::get_if<int64_t>(v); i != nullptr && *i >= 0) return static_cast<uint64_t>(*i);
  return WrongType(key, *v, "a non-negative integer");
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  if (auto* u = std::get_if<uint64_t>(v);
      u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(*u);
  }
  return WrongType(key, *v, "an integer that fits int64");
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* u = std::get_if<uint64_t>(v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return WrongType(key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* b = std::get_if<bool>(v)) return *b;
  return WrongType(key, *v, "a bool");
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* s = std::get_if<std::string>(v)) return *s;
  return WrongType(key, *v, "a string");
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* a = std::get_if<std::vector<std::string>>(v)) return *a;
  return WrongType(key, *v, "a string array");
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* a = std::get_if<std::vector<int64_t>>(v)) return *a;
  return WrongType(key, *v, "an integer array");
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (auto* a = std::get_if<std::vector<double>>(v)) return *a;
  if (auto* a = std::get_if<std::vector<int64_t>>(v))
    return std::vector<double>(a->begin(), a->end());
  return WrongType(key, *v, "a number array");
}

}  // namespace glimpse::model

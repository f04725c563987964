// GGUF parsing follows the layout of ggml/docs/gguf.md (v2 and v3 share it; v1 used 32-bit
// counts and is not accepted):
//   header:  "GGUF" u32 version, u64 n_tensors, u64 n_kv
//   n_kv ×   { string key, u32 type, value }          string = u64 length + bytes (no NUL)
//   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment, then the data section; offsets are relative to its start.
// Every read goes through Reader, which bounds-checks against the image, so no field of a hostile
// file can move a read outside it.
#include "core/model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/model/mapped_file.h"

namespace glimpse::model {

struct GgufFile::Mapping {
  std::unique_ptr<MappedFile> file;
};

namespace {

// Fields are read by memcpy into host integers, which is only correct on little-endian hosts.
static_assert(std::endian::native == std::endian::little, "GGUF reader assumes little-endian");

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;

// GGUF metadata value type ids.
enum : uint32_t {
  kTypeU8 = 0,
  kTypeI8 = 1,
  kTypeU16 = 2,
  kTypeI16 = 3,
  kTypeU32 = 4,
  kTypeI32 = 5,
  kTypeF32 = 6,
  kTypeBool = 7,
  kTypeString = 8,
  kTypeArray = 9,
  kTypeU64 = 10,
  kTypeI64 = 11,
  kTypeF64 = 12,
};

// Encoded size of one value of a scalar type; 8 (the length prefix) for strings, 0 for unknown.
uint64_t MinEncodedSize(uint32_t type) {
  switch (type) {
    case kTypeU8:
    case kTypeI8:
    case kTypeBool:
      return 1;
    case kTypeU16:
    case kTypeI16:
      return 2;
    case kTypeU32:
    case kTypeI32:
    case kTypeF32:
      return 4;
    case kTypeU64:
    case kTypeI64:
    case kTypeF64:
    case kTypeString:
      return 8;
    default:
      return 0;
  }
}

const char* TypeName(uint32_t type) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return type < std::size(kNames) ? kNames[type] : "unknown";
}

absl::Status WithContext(const absl::Status& s, std::string_view context) {
  return absl::Status(s.code(), absl::StrCat(std::string(context), ": ", s.message()));
}

// Bounds-checked little-endian cursor over the image. Truncation is DataLoss.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Read(void* out, uint64_t n, const char* what) {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrFormat(
          "truncated at offset %d reading %s: need %d bytes, %d left", pos_, what, n, remaining()));
    }
    if (n > 0) std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Pod(const char* what) {
    T value{};  // initialised: GCC cannot see that Read() fills it on success
    RETURN_IF_ERROR(Read(&value, sizeof(T), what));
    return value;
  }

  absl::StatusOr<std::string> String(const char* what) {
    const uint64_t at = pos_;
    ASSIGN_OR_RETURN(uint64_t len, Pod<uint64_t>(what));
    if (len > remaining()) {
      return absl::DataLossError(absl::StrFormat(
          "%s at offset %d has length %d but only %d bytes remain", what, at, len, remaining()));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// A scalar number widened to the variant's storage type.
absl::StatusOr<GgufValue> ReadNumber(Reader& r, uint32_t type) {
  const uint64_t at = r.pos();
  switch (type) {
    case kTypeU8: {
      ASSIGN_OR_RETURN(uint8_t v, r.Pod<uint8_t>("u8 value"));
      return GgufValue(uint64_t{v});
    }
    case kTypeU16: {
      ASSIGN_OR_RETURN(uint16_t v, r.Pod<uint16_t>("u16 value"));
      return GgufValue(uint64_t{v});
    }
    case kTypeU32: {
      ASSIGN_OR_RETURN(uint32_t v, r.Pod<uint32_t>("u32 value"));
      return GgufValue(uint64_t{v});
    }
    case kTypeU64: {
      ASSIGN_OR_RETURN(uint64_t v, r.Pod<uint64_t>("u64 value"));
      return GgufValue(v);
    }
    case kTypeI8: {
      ASSIGN_OR_RETURN(int8_t v, r.Pod<int8_t>("i8 value"));
      return GgufValue(int64_t{v});
    }
    case kTypeI16: {
      ASSIGN_OR_RETURN(int16_t v, r.Pod<int16_t>("i16 value"));
      return GgufValue(int64_t{v});
    }
    case kTypeI32: {
      ASSIGN_OR_RETURN(int32_t v, r.Pod<int32_t>("i32 value"));
      return GgufValue(int64_t{v});
    }
    case kTypeI64: {
      ASSIGN_OR_RETURN(int64_t v, r.Pod<int64_t>("i64 value"));
      return GgufValue(v);
    }
    case kTypeF32: {
      ASSIGN_OR_RETURN(float v, r.Pod<float>("f32 value"));
      return GgufValue(double{v});
    }
    case kTypeF64: {
      ASSIGN_OR_RETURN(double v, r.Pod<double>("f64 value"));
      return GgufValue(v);
    }
    case kTypeBool: {
      ASSIGN_OR_RETURN(uint8_t v, r.Pod<uint8_t>("bool value"));
      if (v > 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("bool at offset %d has value %d (must be 0 or 1)", at, v));
      }
      return GgufValue(v == 1);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown value type %d at offset %d", type, at));
  }
}

// Arrays keep strings, integers (as int64; bools as 0/1) and floats (as double).
absl::StatusOr<GgufValue> ReadArray(Reader& r) {
  const uint64_t at = r.pos();
  ASSIGN_OR_RETURN(uint32_t elem_type, r.Pod<uint32_t>("array element type"));
  ASSIGN_OR_RETURN(uint64_t count, r.Pod<uint64_t>("array length"));
  if (elem_type == kTypeArray) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nested array at offset %d is not supported", at));
  }
  const uint64_t elem_size = MinEncodedSize(elem_type);
  if (elem_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("array at offset %d has unknown element type %d", at, elem_type));
  }
  // Bound the length by the bytes left before allocating anything for it.
  if (count > r.remaining() / elem_size) {
    return absl::DataLossError(
        absl::StrFormat("array at offset %d has %d elements of type %s but only %d bytes remain",
                        at, count, TypeName(elem_type), r.remaining()));
  }
  if (elem_type == kTypeString) {
    std::vector<std::string> out;
    out.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(std::string s, r.String("array string"));
      out.push_back(std::move(s));
    }
    return GgufValue(std::move(out));
  }
  const bool is_float = elem_type == kTypeF32 || elem_type == kTypeF64;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  if (is_float) {
    floats.reserve(count);
  } else {
    ints.reserve(count);
  }
  for (uint64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(GgufValue v, ReadNumber(r, elem_type));
    if (auto* d = std::get_if<double>(&v)) {
      floats.push_back(*d);
    } else if (auto* s = std::get_if<int64_t>(&v)) {
      ints.push_back(*s);
    } else if (auto* b = std::get_if<bool>(&v)) {
      ints.push_back(*b ? 1 : 0);
    } else {
      const uint64_t u = std::get<uint64_t>(v);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("array at offset %d: element %d = %d does not fit int64", at, i, u));
      }
      ints.push_back(static_cast<int64_t>(u));
    }
  }
  if (is_float) return GgufValue(std::move(floats));
  return GgufValue(std::move(ints));
}

absl::StatusOr<GgufValue> ReadValue(Reader& r, uint32_t type) {
  if (type == kTypeString) {
    ASSIGN_OR_RETURN(std::string s, r.String("string value"));
    return GgufValue(std::move(s));
  }
  if (type == kTypeArray) return ReadArray(r);
  return ReadNumber(r, type);
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// Raw tensor info as stored, before the data section is known.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Checks type, rank, dims and block divisibility; computes the byte size. `file_size` bounds
// every product so that nothing overflows.
absl::Status ValidateShape(TensorInfo& t, const std::vector<uint64_t>& raw_dims,
                           uint64_t file_size) {
  if (!kernels::IsSupportedDType(t.type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unsupported tensor type %d (supported: F32=0, F16=1, Q4_0=2, Q4_1=3, Q8_0=8, Q4_K=12, "
        "Q5_K=13, Q6_K=14, BF16=30)",
        t.type));
  }
  const auto type = static_cast<kernels::DType>(t.type);
  for (size_t i = 0; i < raw_dims.size(); ++i) {
    if (raw_dims[i] == 0 || raw_dims[i] > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dimension %d is %d (must be in 1..2^63-1)", i, raw_dims[i]));
    }
    t.dims.push_back(static_cast<int64_t>(raw_dims[i]));
  }
  const int64_t block = kernels::BlockElems(type);
  if (t.dims[0] % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ne[0] = %d is not a multiple of %s's block size %d", t.dims[0],
                        kernels::DTypeName(type), block));
  }
  // Every block takes at least one byte, so a row with more blocks than the file has bytes cannot
  // fit; checking that first keeps RowBytes from overflowing.
  if (static_cast<uint64_t>(t.dims[0] / block) > file_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ne[0] = %d is larger than the file could hold", t.dims[0]));
  }
  uint64_t bytes = static_cast<uint64_t>(kernels::RowBytes(type, t.dims[0]));
  for (size_t i = 1; i < t.dims.size(); ++i) {
    if (MulOverflows(bytes, static_cast<uint64_t>(t.dims[i]), &bytes) || bytes > file_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shape %s needs more bytes than the %d-byte file holds",
                          absl::StrCat("[", absl::StrJoin(t.dims, ", "), "]"), file_size));
    }
  }
  t.bytes = bytes;
  return absl::OkStatus();
}

absl::StatusOr<TensorInfo> ReadTensorInfo(Reader& r, uint64_t file_size) {
  TensorInfo t;
  ASSIGN_OR_RETURN(t.name, r.String("tensor name"));
  if (t.name.empty()) return absl::InvalidArgumentError("empty tensor name");
  auto body = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(uint32_t n_dims, r.Pod<uint32_t>("tensor rank"));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d (must be 1..%d)", n_dims, kMaxDims));
    }
    std::vector<uint64_t> raw_dims(n_dims);
    for (uint32_t i = 0; i < n_dims; ++i) {
      ASSIGN_OR_RETURN(raw_dims[i], r.Pod<uint64_t>("tensor dimension"));
    }
    ASSIGN_OR_RETURN(t.type, r.Pod<uint32_t>("tensor type"));
    ASSIGN_OR_RETURN(t.offset, r.Pod<uint64_t>("tensor offset"));
    return ValidateShape(t, raw_dims, file_size);
  };
  absl::Status s = body();
  if (!s.ok()) return WithContext(s, absl::StrCat("tensor '", t.name, "'"));
  return t;
}

absl::Status ReadMetadata(Reader& r, uint64_t n_kv,
                          std::unordered_map<std::string, GgufValue>* metadata) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = r.pos();
    ASSIGN_OR_RETURN(std::string key, r.String("metadata key"));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("empty metadata key at offset %d", at));
    }
    auto value = [&]() -> absl::StatusOr<GgufValue> {
      ASSIGN_OR_RETURN(uint32_t type, r.Pod<uint32_t>("metadata value type"));
      return ReadValue(r, type);
    }();
    if (!value.ok()) return WithContext(value.status(), absl::StrCat("metadata key '", key, "'"));
    if (!metadata->emplace(key, *std::move(value)).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate metadata key '", key, "'"));
    }
  }
  return absl::OkStatus();
}

// Tensor byte ranges must not overlap (a hostile file could otherwise alias two weights).
absl::Status CheckNoOverlap(const std::vector<TensorInfo>& infos) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(infos.size());
  for (const TensorInfo& t : infos) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& next = *by_offset[i];
    if (prev.offset + prev.bytes > next.offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensors '%s' [%d, %d) and '%s' [%d, %d) overlap in the data section", prev.name,
          prev.offset, prev.offset + prev.bytes, next.name, next.offset, next.offset + next.bytes));
    }
  }
  return absl::OkStatus();
}

// Resolves each tensor's offset against the data section, which starts at the first multiple of
// `alignment` after the tensor infos, and checks alignment and bounds. Fills `tensors` (parallel
// to `infos`) with data pointers.
absl::Status PlaceTensors(const std::vector<TensorInfo>& infos, uint64_t header_end,
                          uint64_t alignment, const uint8_t* base, uint64_t size,
                          std::vector<GgufTensor>* tensors) {
  if (infos.empty()) return absl::OkStatus();
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  if (data_start > size) {
    return absl::DataLossError(absl::StrFormat(
        "data section starts at offset %d, past the end of the %d-byte file", data_start, size));
  }
  const uint64_t data_size = size - data_start;
  for (size_t i = 0; i < infos.size(); ++i) {
    const TensorInfo& t = infos[i];
    if (t.offset % alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': offset %d is not a multiple of the alignment %d", t.name,
                          t.offset, alignment));
    }
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return absl::DataLossError(absl::StrFormat(
          "tensor '%s': %d bytes at offset %d do not fit in the %d-byte data section (file "
          "offset %d)",
          t.name, t.bytes, t.offset, data_size, data_start));
    }
    (*tensors)[i].data = base + data_start + t.offset;
    (*tensors)[i].bytes = t.bytes;
  }
  return CheckNoOverlap(infos);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  auto gguf = std::unique_ptr<GgufFile>(new GgufFile());
  gguf->mapping_ = std::make_unique<Mapping>();
  gguf->mapping_->file = std::move(file);
  absl::Status s = gguf->Init();
  if (!s.ok()) return WithContext(s, path);
  return gguf;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size) {
  auto gguf = std::unique_ptr<GgufFile>(new GgufFile());
  gguf->mapping_ = std::make_unique<Mapping>();
  gguf->mapping_->file = MappedFile::Copy(data, size);
  RETURN_IF_ERROR(gguf->Init());
  return gguf;
}

GgufFile::~GgufFile() = default;

absl::Status GgufFile::Init() {
  const uint8_t* base = mapping_->file->data();
  const uint64_t size = mapping_->file->size();
  Reader r(base, size);
  ASSIGN_OR_RETURN(uint32_t magic, r.Pod<uint32_t>("magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a GGUF file: magic 0x%08x, expected 0x%08x (\"GGUF\")", magic, kGgufMagic));
  }
  ASSIGN_OR_RETURN(version_, r.Pod<uint32_t>("version"));
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unsupported GGUF version %d (supported: 2, 3)", version_));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, r.Pod<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, r.Pod<uint64_t>("metadata count"));
  // Smallest encodings: a key/value is 8 (key length) + 4 (type) + 1 (u8) bytes; a tensor info is
  // 8 (name length) + 4 (rank) + 8 (one dim) + 4 (type) + 8 (offset) bytes.
  if (n_kv > r.remaining() / 13) {
    return absl::DataLossError(absl::StrFormat(
        "metadata count %d cannot fit in the %d bytes after the header", n_kv, r.remaining()));
  }
  if (n_tensors > r.remaining() / 32) {
    return absl::DataLossError(absl::StrFormat(
        "tensor count %d cannot fit in the %d bytes after the header", n_tensors, r.remaining()));
  }
  RETURN_IF_ERROR(ReadMetadata(r, n_kv, &metadata_));
  uint64_t alignment = kDefaultAlignment;
  if (HasKey("general.alignment")) {
    ASSIGN_OR_RETURN(alignment, GetUint("general.alignment"));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 30)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("general.alignment = %d is not a power of two in 1..2^30", alignment));
    }
  }
  std::vector<TensorInfo> infos;
  infos.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    ASSIGN_OR_RETURN(TensorInfo t, ReadTensorInfo(r, size));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    tensors_.push_back(GgufTensor{t.name, static_cast<kernels::DType>(t.type), t.dims});
    infos.push_back(std::move(t));
  }
  return PlaceTensors(infos, r.pos(), alignment, base, size, &tensors_);
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace glimpse::model

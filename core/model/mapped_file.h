// A read-only byte range that backs a parsed model file: either a private read-only mmap of a
// whole file or an owned copy of an in-memory image (tests, the fuzzer). GgufFile and
// SafetensorsFile keep one alive for as long as tensor pointers into it may be used.
//
// The owned copy starts on a 64-byte boundary, like a page-aligned mapping, so tensor data keeps
// the alignment its file format promises. Immutable after construction; thread-safe to read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace glimpse::model {

class MappedFile {
 public:
  // NotFound when `path` does not exist, InvalidArgument when it is not a regular file, another
  // errno-derived code when it cannot be opened or mapped. An empty file maps to size() == 0.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  static std::unique_ptr<MappedFile> Copy(const uint8_t* data, size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_base_ = nullptr;  // non-null when mmapped; unmapped in the destructor
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, AlignedDelete> owned_;  // the copy, when not mmapped
};

}  // namespace glimpse::model

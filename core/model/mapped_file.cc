#include "core/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace glimpse::model {
namespace {

constexpr std::align_val_t kCopyAlignment{64};

absl::Status ErrnoError(int err, std::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(std::string(what), " ", path, ": ", std::strerror(err)));
}

}  // namespace

void MappedFile::AlignedDelete::operator()(uint8_t* p) const {
  ::operator delete[](p, kCopyAlignment);
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("not a regular file: ", path));
  }
  auto file = std::unique_ptr<MappedFile>(new MappedFile());
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    // MAP_PRIVATE + PROT_READ: the weights are never written, and a private mapping keeps a
    // concurrent writer's changes from appearing under validated offsets as far as Linux allows.
    void* base = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoError(err, "cannot mmap", path);
    }
    file->map_base_ = base;
    file->data_ = static_cast<const uint8_t*>(base);
  }
  ::close(fd);  // the mapping keeps its own reference to the file
  return file;
}

std::unique_ptr<MappedFile> MappedFile::Copy(const uint8_t* data, size_t size) {
  auto file = std::unique_ptr<MappedFile>(new MappedFile());
  file->size_ = size;
  if (size > 0) {
    file->owned_.reset(static_cast<uint8_t*>(::operator new[](size, kCopyAlignment)));
    std::memcpy(file->owned_.get(), data, size);
    file->data_ = file->owned_.get();
  }
  return file;
}

MappedFile::~MappedFile() {
  if (map_base_ != nullptr) ::munmap(map_base_, size_);
}

}  // namespace glimpse::model

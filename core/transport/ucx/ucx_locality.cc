#include "core/transport/ucx/ucx_locality.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/fnv1a.h"

namespace glimpse::transport::ucx_locality {
namespace {

std::string Namespace(const char* name) {
  std::error_code ec;
  return std::filesystem::read_symlink(absl::StrCat("/proc/self/ns/", name), ec).string();
}

}  // namespace

uint64_t LocalHostKey() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  const uint64_t key =
      Fnv1a64(absl::StrCat(boot_id, "|", geteuid(), "|", Namespace("ipc"), "|", Namespace("pid")));
  return key == 0 ? 1 : key;
}

bool TlsHasSharedMemory(const char* ucx_tls) {
  absl::string_view tls = ucx_tls == nullptr ? "all" : ucx_tls;
  const bool excluding = !tls.empty() && tls.front() == '^';
  if (excluding) tls.remove_prefix(1);
  bool aliases = false, posix = false, sysv = false;
  for (absl::string_view t : absl::StrSplit(tls, ',')) {
    aliases |= t == "all" || t == "sm" || t == "shm" || t == "mm";
    posix |= t == "posix";
    sysv |= t == "sysv";
  }
  if (excluding) return !aliases && !(posix && sysv);
  return aliases || posix || sysv;
}

}  // namespace glimpse::transport::ucx_locality

// FNV-1a, 64 bits: a fixed, dependency-free fingerprint of bytes, for keys that must agree across
// processes and builds (a host's identity, a calibration file's content). Not collision-resistant:
// never for input an adversary chooses.
#pragma once

#include <cstdint>
#include <string_view>

namespace glimpse {

inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace glimpse

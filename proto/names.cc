#include "proto/names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace glimpse::v1 {

std::string StateSourceName(StateSource source) {
  return absl::AsciiStrToLower(absl::StripPrefix(StateSource_Name(source), "STATE_SOURCE_"));
}

}  // namespace glimpse::v1

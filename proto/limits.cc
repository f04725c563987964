#include "proto/limits.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace glimpse::v1 {

absl::Status CheckId(std::string_view field, std::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrFormat("%s is empty", field));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is %d bytes long (at most %d)", field, id.size(), kMaxIdBytes));
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s \"%s\" has the character 0x%02x (allowed: letters, digits, . _ : -)",
                          field, absl::CHexEscape(absl::string_view(id.data(), id.size())),
                          static_cast<unsigned char>(c)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckToolName(std::string_view field, std::string_view name) {
  if (name.size() <= kMaxToolNameBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s is %d bytes (at most %d)", field, name.size(), kMaxToolNameBytes));
}

}  // namespace glimpse::v1

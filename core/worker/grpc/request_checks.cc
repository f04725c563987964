#include "core/worker/grpc/request_checks.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::worker {

absl::Status CheckSessionId(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
           c == '-';
  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("session_id \"", id, "\" must match [A-Za-z0-9._:-]{1,128}"));
}

absl::StatusOr<kvstate::NamespaceKey> NamespaceFromBytes(const std::string& bytes) {
  kvstate::NamespaceKey ns{};
  if (bytes.size() != ns.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace_key must be 16 bytes, got ", bytes.size()));
  }
  std::copy(bytes.begin(), bytes.end(), ns.begin());
  return ns;
}

absl::StatusOr<Policy> PolicyFromProto(const v1::EvictionPolicy& p) {
  ASSIGN_OR_RETURN(Policy policy, ParsePolicy(p.method(), p.budget_ratio(), p.codec()));
  RETURN_IF_ERROR(SetDecodeEviction(policy, p.decode_budget_tokens(), p.decode_interval()));
  return policy;
}

}  // namespace glimpse::worker

#include "core/worker/grpc/request_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::worker {

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

#include "core/common/grpc/identity.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "grpc/grpc_security_constants.h"

namespace glimpse {
namespace {

// Debian's Abseil has its own string_view: StrCat takes std::string.
const std::string kPrefix = "spiffe://glimpse/";

std::string Describe(const PeerIdentity& p) { return absl::StrCat(p.role, " '", p.id, "'"); }

std::string Roles(std::initializer_list<std::string_view> roles) {
  std::string out;
  for (std::string_view r : roles) absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(r));
  return out;
}

}  // namespace

std::string IdentityUri(std::string_view role, std::string_view id) {
  return absl::StrCat(kPrefix, std::string(role), "/", std::string(id));
}

absl::StatusOr<std::optional<PeerIdentity>> CallerIdentity(const grpc::ServerContext& ctx) {
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  for (const grpc::string_ref& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    const std::string u(uri.data(), uri.size());
    if (!u.starts_with(kPrefix)) continue;
    const std::string path = u.substr(kPrefix.size());
    const size_t slash = path.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == path.size() ||
        path.find('/', slash + 1) != std::string::npos) {
      continue;
    }
    return PeerIdentity{path.substr(0, slash), path.substr(slash + 1)};
  }
  return absl::UnauthenticatedError(absl::StrCat(
      "the client certificate names no Glimpse identity (a URI SAN ", kPrefix, "<role>/<id>)"));
}

absl::Status Authorize(const grpc::ServerContext& ctx, std::string_view what,
                       std::initializer_list<std::string_view> allowed) {
  ASSIGN_OR_RETURN(const std::optional<PeerIdentity> caller, CallerIdentity(ctx));
  if (!caller.has_value()) return absl::OkStatus();
  for (std::string_view role : allowed) {
    if (caller->role == role) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(std::string(what), " is for ", Roles(allowed),
                                                  "; the caller is ", Describe(*caller)));
}

absl::Status AuthorizeNode(const grpc::ServerContext& ctx, std::string_view what,
                           std::initializer_list<std::string_view> allowed,
                           std::string_view node_id) {
  RETURN_IF_ERROR(Authorize(ctx, what, allowed));
  ASSIGN_OR_RETURN(const std::optional<PeerIdentity> caller, CallerIdentity(ctx));
  if (caller.has_value() && caller->id != node_id && caller->id != "*") {
    return absl::PermissionDeniedError(
        absl::StrCat(std::string(what), " for node '", std::string(node_id), "': the caller is ",
                     Describe(*caller), " and acts only for itself"));
  }
  return absl::OkStatus();
}

}  // namespace glimpse

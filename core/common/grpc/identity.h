// Who is calling an internal service: the identity in the caller's TLS client certificate, and
// the role checks every internal RPC makes with it.
//
// A Glimpse node's certificate names it by a URI SAN, spiffe://glimpse/<role>/<id> (roles below;
// <id> is the node's node_id, or a name for the frontend and operators). The id `*` is a
// certificate shared by every node of a role (a Kubernetes Secret mounted by every replica): it
// may act for any node id of that role, so role checks hold but a node is not bound to its id.
// Services that require client certificates (tls.client_ca set: mTLS) thus know each caller's role
// and id; every internal handler calls Authorize (or AuthorizeNode) before it does anything. On a
// connection without a verified client certificate (plaintext, which service_main allows only on
// loopback or with insecure_listen, or a server without tls.client_ca) there is no identity and the
// checks pass: such a deployment trusts its network, as before mTLS.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace glimpse {

namespace roles {
inline constexpr std::string_view kFrontend = "frontend";
inline constexpr std::string_view kCoordinator = "coordinator";
inline constexpr std::string_view kDecode = "decode";
inline constexpr std::string_view kPrefill = "prefill";
inline constexpr std::string_view kCache = "cache";
inline constexpr std::string_view kAdmin = "admin";  // an operator's tools (glimpse up, the CLI)
}  // namespace roles

struct PeerIdentity {
  std::string role;
  std::string id;
};

// "spiffe://glimpse/<role>/<id>".
std::string IdentityUri(std::string_view role, std::string_view id);

// The caller's identity; nullopt on a connection without a verified client certificate.
// Unauthenticated when the certificate carries no Glimpse identity URI.
absl::StatusOr<std::optional<PeerIdentity>> CallerIdentity(const grpc::ServerContext& ctx);

// OK when the caller's role is one of `allowed` (or the connection carries no identity, see
// above); PermissionDenied naming the caller, the method's roles and `what` (the RPC) otherwise.
absl::Status Authorize(const grpc::ServerContext& ctx, std::string_view what,
                       std::initializer_list<std::string_view> allowed);

// Authorize, and the caller's id must be `node_id` (or `*`): a node registers, heartbeats and
// leaves only as itself.
absl::Status AuthorizeNode(const grpc::ServerContext& ctx, std::string_view what,
                           std::initializer_list<std::string_view> allowed,
                           std::string_view node_id);

}  // namespace glimpse

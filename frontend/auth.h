// Tenants: who is calling (a bearer token names the tenant) and what keeps tenants apart.
//
// Authenticator maps "authorization: Bearer <token>" metadata to a tenant. Its tokens come from a
// YAML file, a map token -> tenant; with no file there is no authentication and every caller is the
// tenant "default". Tokens are kept only as SHA-256 digests and looked up by digest, so neither a
// timing difference nor an error message reveals anything about a configured token. Immutable and
// thread-safe after construction.
//
// Isolation (DESIGN.md §3): a tenant's KV states live under a namespace key derived from its salt,
// TenantSalt = HMAC-SHA256(secret, tenant), so another tenant can neither compute nor hit them; a
// tenant's sessions are known downstream (coordinator, decode workers) under ScopedSessionId, so
// two tenants using the same session id get two unrelated sessions and one cannot tell whether the
// other's id exists.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace glimpse::frontend {

inline constexpr char kDefaultTenant[] = "default";

// Tenant names: [A-Za-z0-9._-]{1,64} (no ':' so that ScopedSessionId is unambiguous).
absl::Status ValidateTenant(std::string_view tenant);

class Authenticator {
 public:
  // Every caller is kDefaultTenant.
  static std::unique_ptr<Authenticator> None();
  // token -> tenant. InvalidArgument for an empty token or a bad tenant name (the token is never
  // echoed; the error names the tenant).
  static absl::StatusOr<std::unique_ptr<Authenticator>> FromMap(
      const std::map<std::string, std::string>& token_to_tenant);
  // A YAML file holding one map token -> tenant. Errors name the file and the problem.
  static absl::StatusOr<std::unique_ptr<Authenticator>> FromFile(const std::string& path);

  bool enabled() const { return enabled_; }
  size_t tenants() const;  // distinct tenants configured (0 when disabled)

  // `authorization`: the value of the "authorization" metadata, nullopt when absent. Returns the
  // tenant, or Unauthenticated (missing metadata, not "Bearer <token>", unknown token).
  absl::StatusOr<std::string> Authenticate(std::optional<std::string_view> authorization) const;

 private:
  Authenticator() = default;
  bool enabled_ = false;
  std::map<std::string, std::string> digest_to_tenant_;  // SHA-256(token) -> tenant
};

// HMAC-SHA256(secret, tenant): 32 raw bytes, the tenant salt of every namespace key.
std::string TenantSalt(std::string_view secret, std::string_view tenant);

// The secret behind every tenant salt: the file's bytes with trailing whitespace removed, at least
// 16 bytes. Errors name the file.
absl::StatusOr<std::string> LoadSaltSecret(const std::string& path);
// 32 random bytes (from the OS); Internal when the random source fails.
absl::StatusOr<std::string> RandomSaltSecret();

// The id a tenant's session has downstream: "<tenant>:" + 32 hex digits of
// SHA-256("glimpse-session-v1" ‖ tenant ‖ 0x00 ‖ session_id). At most 97 characters of
// [A-Za-z0-9._:-], as the coordinator requires.
std::string ScopedSessionId(std::string_view tenant, std::string_view session_id);

}  // namespace glimpse::frontend

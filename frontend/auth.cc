#include "frontend/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace glimpse::frontend {
namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Sha256(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: cannot be read", what, path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Secrets readable by anyone on the machine are worth a warning, not a refusal (containers often
// mount them 0644).
void WarnIfWorldReadable(const std::string& path, std::string_view what) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0) {
    log::Warning("secret file is world-readable", {{"what", std::string(what)}, {"path", path}});
  }
}

}  // namespace

absl::Status ValidateTenant(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tenant \"%s\" must be 1 to 64 characters", AbslView(tenant)));
  }
  for (char c : tenant) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tenant \"%s\" has the character 0x%02x (allowed: letters, digits, . _ -)",
          absl::CHexEscape(AbslView(tenant)), static_cast<unsigned char>(c)));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<Authenticator> Authenticator::None() {
  return std::unique_ptr<Authenticator>(new Authenticator());
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::FromMap(
    const std::map<std::string, std::string>& token_to_tenant) {
  std::unique_ptr<Authenticator> auth(new Authenticator());
  auth->enabled_ = true;
  for (const auto& [token, tenant] : token_to_tenant) {
    if (token.empty()) return absl::InvalidArgumentError("a token is empty");
    RETURN_IF_ERROR(ValidateTenant(tenant));
    auth->digest_to_tenant_[Sha256(token)] = tenant;
  }
  if (auth->digest_to_tenant_.empty()) return absl::InvalidArgumentError("no tokens configured");
  return auth;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, "auth.tokens_file");
  if (!text.ok()) return text.status();
  WarnIfWorldReadable(path, "auth.tokens_file");
  std::map<std::string, std::string> tokens;
  try {
    YAML::Node root = YAML::Load(*text);
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("auth.tokens_file %s: want a YAML map of bearer token -> tenant", path));
    }
    for (const auto& entry : root) {
      if (!entry.first.IsScalar() || !entry.second.IsScalar()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "auth.tokens_file %s: line %d: want token: tenant", path, entry.first.Mark().line + 1));
      }
      tokens[entry.first.as<std::string>()] = entry.second.as<std::string>();
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth.tokens_file %s: YAML error at line %d: %s", path, e.mark.line + 1, e.msg));
  }
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = FromMap(tokens);
  if (!auth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("auth.tokens_file %s: %s", path, auth.status().message()));
  }
  return auth;
}

size_t Authenticator::tenants() const {
  std::set<std::string> distinct;
  for (const auto& [digest, tenant] : digest_to_tenant_) distinct.insert(tenant);
  return distinct.size();
}

absl::StatusOr<std::string> Authenticator::Authenticate(
    std::optional<std::string_view> authorization) const {
  if (!enabled_) return std::string(kDefaultTenant);
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError("missing \"authorization: Bearer <token>\" metadata");
  }
  absl::string_view value = absl::StripAsciiWhitespace(AbslView(*authorization));
  // The scheme is case-insensitive (RFC 7235 section 2.1).
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return absl::UnauthenticatedError("the authorization metadata is not \"Bearer <token>\"");
  }
  absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(7));
  auto it = digest_to_tenant_.find(Sha256(std::string_view(token.data(), token.size())));
  if (token.empty() || it == digest_to_tenant_.end()) {
    return absl::UnauthenticatedError("unknown bearer token");
  }
  return it->second;
}

std::string TenantSalt(std::string_view secret, std::string_view tenant) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(tenant.data()), tenant.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

absl::StatusOr<std::string> LoadSaltSecret(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, "auth.salt_secret_file");
  if (!text.ok()) return text.status();
  WarnIfWorldReadable(path, "auth.salt_secret_file");
  std::string secret(absl::StripTrailingAsciiWhitespace(*text));
  if (secret.size() < 16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth.salt_secret_file %s: %d bytes; want at least 16 (e.g. openssl rand -hex 32)", path,
        secret.size()));
  }
  return secret;
}

absl::StatusOr<std::string> RandomSaltSecret() {
  std::string secret(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()), 32) != 1) {
    return absl::InternalError("RAND_bytes failed: no random salt secret");
  }
  return secret;
}

std::string ScopedSessionId(std::string_view tenant, std::string_view session_id) {
  std::string digest = Sha256(absl::StrCat("glimpse-session-v1", AbslView(tenant),
                                           std::string(1, '\0'), AbslView(session_id)));
  return absl::StrCat(AbslView(tenant), ":", absl::BytesToHexString(digest.substr(0, 16)));
}

}  // namespace glimpse::frontend

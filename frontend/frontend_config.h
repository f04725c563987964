// glimpse-frontend's configuration keys (core/common/config.h) and what they become: the service's
// options, its authenticator and the secret behind every tenant salt (docs/frontend.md).
//
// Salt secret policy: with authentication on (auth.tokens_file set) auth.salt_secret_file is
// required, because every frontend process must derive the same namespace keys for a tenant or its
// stored states are unreachable from the others and after a restart. With authentication off (one
// tenant, "default", a loopback development setup) an unset file means a random secret per process,
// logged as a warning.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/config.h"
#include "frontend/auth.h"
#include "frontend/frontend_service.h"
#include "frontend/openai_server.h"

namespace glimpse::frontend {

std::vector<ConfigKey> FrontendConfigKeys();

// Every value checked; errors name the key and the value. Reads no files.
absl::StatusOr<FrontendOptions> OptionsFromConfig(const Config& config);

// The OpenAI API's options (openai.*; TLS from tls.*, as the gRPC API's); nullopt when
// openai.listen is empty (no HTTP API). `model_path` names the served model when
// openai.model_name is empty (its file name without .gguf).
absl::StatusOr<std::optional<OpenAiServerOptions>> OpenAiOptionsFromConfig(
    const Config& config, const std::string& model_path);

struct Tenancy {
  std::unique_ptr<Authenticator> auth;
  std::string salt_secret;
  bool random_secret = false;  // no salt_secret_file: states are not reusable across restarts
};
// Loads auth.tokens_file and auth.salt_secret_file under the policy above.
absl::StatusOr<Tenancy> LoadTenancy(const Config& config);

}  // namespace glimpse::frontend

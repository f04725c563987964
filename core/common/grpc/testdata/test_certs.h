// TLS certificates for tests, made at test time with the openssl CLI in a fresh directory: a CA
// (ca.pem), a server certificate for 127.0.0.1 / localhost (server.pem, server.key) and a client
// certificate (client.pem, client.key), both signed by the CA. Test use only.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace glimpse::testing {

// The directory holding the files (under /tmp, named from `prefix`); the caller removes it.
// Internal error naming the log when openssl fails (is it installed?).
absl::StatusOr<std::string> MakeTestCertificates(const std::string& prefix);

}  // namespace glimpse::testing

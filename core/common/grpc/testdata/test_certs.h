// TLS certificates for tests (certificates.h) in a fresh directory: a CA (ca.pem), and two
// certificates for 127.0.0.1 / localhost without a Glimpse identity, server.pem / server.key and
// client.pem / client.key. Test use only.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace glimpse::testing {

// The directory holding the files (under /tmp, named from `prefix`); the caller removes it.
// Internal error naming the log when openssl fails (is it installed?).
absl::StatusOr<std::string> MakeTestCertificates(const std::string& prefix);

}  // namespace glimpse::testing

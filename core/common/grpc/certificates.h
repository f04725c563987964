// Certificates for a cluster's mutual TLS, made with the openssl CLI (Debian's `openssl`): a CA,
// and for each member a P-256 key and a certificate the CA signed, for server and client use
// alike, valid for localhost, 127.0.0.1 and the member's DNS names, and naming its Glimpse
// identity (identity.h) when it has one. `glimpse up` makes a throwaway set for its local cluster;
// tests make theirs; a deployment makes one with `glimpse certs` (docs/security.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/grpc/server.h"

namespace glimpse {

struct CertificateSpec {
  std::string name;  // files <name>.pem and <name>.key
  std::string role;  // with `id`: the identity URI spiffe://glimpse/<role>/<id>; empty: none
  std::string id;
  std::vector<std::string> dns_names;  // beyond localhost; "*.<name>" for a wildcard
};

// Writes <dir>/ca.pem and ca.key (made once: an existing CA is reused) and <name>.pem and
// <name>.key per spec (keys readable by the owner only), valid for `days`. Internal error naming
// <dir>/certificates.log when openssl fails.
absl::Status MakeCertificates(const std::string& dir, const std::vector<CertificateSpec>& specs,
                              int days = 30);

// `name`'s files under `dir` with the CA: how it serves (cert, key, client CA) and how it
// connects (cert, key, server CA) are the same three files.
TlsFiles CertificateFiles(const std::string& dir, const std::string& name);

}  // namespace glimpse

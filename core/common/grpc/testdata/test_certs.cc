#include "core/common/grpc/testdata/test_certs.h"

#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "core/common/grpc/certificates.h"

namespace glimpse::testing {

absl::StatusOr<std::string> MakeTestCertificates(const std::string& prefix) {
  std::string dir = absl::StrCat("/tmp/", prefix, "_XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", dir, " failed"));
  }
  CertificateSpec server, client;
  server.name = "server";
  client.name = "client";
  absl::Status made = MakeCertificates(dir, {server, client}, 2);
  if (!made.ok()) return made;
  return dir;
}

}  // namespace glimpse::testing

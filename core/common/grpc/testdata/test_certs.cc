#include "core/common/grpc/testdata/test_certs.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace glimpse::testing {
namespace {

constexpr char kMakeCerts[] = R"sh(set -e
command -v openssl
K="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $K -keyout ca.key -out ca.pem -days 2 -subj /CN=glimpse-test-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for who in server client; do
  openssl req $K -keyout $who.key -out $who.csr -subj /CN=$who
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile $who.ext -out $who.pem
done
)sh";

}  // namespace

absl::StatusOr<std::string> MakeTestCertificates(const std::string& prefix) {
  std::string dir = absl::StrCat("/tmp/", prefix, "_XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", dir, " failed"));
  }
  std::ofstream(dir + "/make_certs.sh") << kMakeCerts;
  if (std::system(absl::StrCat("cd ", dir, " && sh make_certs.sh >log 2>&1").c_str()) != 0) {
    return absl::InternalError(absl::StrCat(
        "could not make test certificates with the openssl CLI (is it installed?); see ", dir,
        "/log"));
  }
  return dir;
}

}  // namespace glimpse::testing

#include "core/common/grpc/certificates.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/grpc/identity.h"

namespace glimpse {
namespace {

// Names and DNS names go into a shell script: only these characters.
bool Safe(const std::string& s) {
  static const std::regex kSafe("[A-Za-z0-9._-]+");
  return std::regex_match(s, kSafe);
}

constexpr char kCa[] = R"sh(set -e
K="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
umask 077
if [ ! -f ca.pem ]; then
  openssl req -x509 $K -keyout ca.key -out ca.pem -days "$DAYS" -subj /CN=glimpse-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign
fi
)sh";

// Arguments: name, subjectAltName value.
constexpr char kLeaf[] = R"sh(
leaf() {
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' "$2" > "$1.ext"
  openssl req $K -keyout "$1.key" -out "$1.csr" -subj "/CN=$1"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$DAYS" \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}
)sh";

}  // namespace

absl::Status MakeCertificates(const std::string& dir, const std::vector<CertificateSpec>& specs,
                              int days) {
  std::string script = absl::StrCat("DAYS=", days, "\n", kCa, kLeaf);
  for (const CertificateSpec& s : specs) {
    if (!Safe(s.name) || (!s.role.empty() && (!Safe(s.role) || !(Safe(s.id) || s.id == "*")))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "certificate '", s.name,
          "': names, roles and ids are letters, digits, '.', '_', '-' (an id may be '*')"));
    }
    std::vector<std::string> san = {"DNS:localhost", "IP:127.0.0.1"};
    for (const std::string& d : s.dns_names) {
      // A wildcard only as the whole first label (*.glimpse-etcd: every member of a service).
      const bool wildcard = d.starts_with("*.") && Safe(d.substr(2));
      if (!Safe(d) && !wildcard) {
        return absl::InvalidArgumentError(absl::StrCat("DNS name '", d, "'"));
      }
      san.push_back(absl::StrCat("DNS:", d));
    }
    if (!s.role.empty()) san.push_back(absl::StrCat("URI:", IdentityUri(s.role, s.id)));
    absl::StrAppend(&script, "leaf '", s.name, "' '", absl::StrJoin(san, ","), "'\n");
  }
  if (dir.find('\'') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("certificate directory '", dir, "'"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::ofstream(dir + "/certificates.sh") << script;
  const std::string run =
      absl::StrCat("cd '", dir, "' && sh certificates.sh >certificates.log 2>&1");
  if (std::system(run.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("could not make certificates with the openssl CLI (",
                                            "tools/setup/install_deps.sh installs it); see ", dir,
                                            "/certificates.log"));
  }
  return absl::OkStatus();
}

TlsFiles CertificateFiles(const std::string& dir, const std::string& name) {
  return {absl::StrCat(dir, "/", name, ".pem"), absl::StrCat(dir, "/", name, ".key"),
          absl::StrCat(dir, "/ca.pem"), ""};
}

}  // namespace glimpse

#include "tools/cli/certs_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/grpc/certificates.h"
#include "core/common/grpc/identity.h"
#include "core/common/status_macros.h"
#include "tools/cli/args.h"

namespace glimpse::cli {
namespace {

struct CertsOptions {
  std::string dir;
  std::vector<CertificateSpec> specs;
  int days = 365;
};

std::vector<FlagSpec> CertsFlags() {
  return {
      {"dir",
       "where to write ca.pem, ca.key and <name>.pem / <name>.key (an existing CA is reused)",
       false, ""},
      {"members",
       "comma-separated role/id pairs, each a certificate named <role>-<id> ('*' as id: one "
       "certificate every node of the role shares, named <role>)",
       false, "coordinator/*,cache/*,decode/*,prefill/*,frontend/*,admin/operator"},
      {"dns", "comma-separated DNS names every certificate carries besides localhost", false,
       "glimpse.internal"},
      {"days", "validity in days", false, "365"},
      {"help", "show this help", true, ""},
  };
}

absl::StatusOr<CertsOptions> ParseCerts(const Args& a) {
  CertsOptions o;
  o.dir = a.GetString("dir");
  if (o.dir.empty()) return absl::InvalidArgumentError("--dir is required");
  ASSIGN_OR_RETURN(int64_t days, a.GetInt("days", 365));
  if (days < 1 || days > 3650) {
    return absl::InvalidArgumentError(absl::StrCat("--days must be in [1, 3650], got ", days));
  }
  o.days = static_cast<int>(days);
  std::vector<std::string> dns =
      absl::StrSplit(a.GetString("dns", "glimpse.internal"), ',', absl::SkipEmpty());
  const std::string members =
      a.GetString("members", "coordinator/*,cache/*,decode/*,prefill/*,frontend/*,admin/operator");
  for (absl::string_view m : absl::StrSplit(members, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(m, '/');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--members: '", std::string(m), "' is not role/id"));
    }
    CertificateSpec s;
    s.role = parts[0];
    s.id = parts[1];
    s.name = s.id == "*" ? s.role : absl::StrCat(s.role, "-", s.id);
    s.dns_names = dns;
    o.specs.push_back(std::move(s));
  }
  return o;
}

absl::Status RunCerts(const CertsOptions& o) {
  RETURN_IF_ERROR(MakeCertificates(o.dir, o.specs, o.days));
  for (const CertificateSpec& s : o.specs) {
    std::printf("%s/%s.pem  %s\n", o.dir.c_str(), s.name.c_str(),
                IdentityUri(s.role, s.id).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int CertsCommand(int argc, char** argv) {
  return RunSubcommand<CertsOptions>("certs", "--dir DIR [flags]", CertsFlags(), argc, argv,
                                     ParseCerts, RunCerts);
}

}  // namespace glimpse::cli

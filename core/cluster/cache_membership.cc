#include "core/cluster/cache_membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {

std::vector<ConfigKey> CacheMembershipKeys() {
  using T = ConfigType;
  return {
      {"membership.etcd_endpoints", T::kStringList, "",
       "etcd members' client addresses (host:port,...): cache nodes announce themselves there on "
       "a lease (membership.ttl) and every worker and cache node watches which are alive, "
       "placing states over them (cache_node and replication.peers serve until etcd first "
       "answers). Empty: the configured lists."},
      {"membership.etcd_prefix", T::kString, "/glimpse/members/",
       "Key prefix of this Glimpse cluster's members in etcd."},
      {"membership.etcd_ca", T::kString, "",
       "CA file that signed the etcd members' certificates: talk to etcd over TLS; empty: "
       "plaintext."},
      {"membership.etcd_cert", T::kString, "",
       "This node's client certificate for etcd (its --client-cert-auth), with "
       "membership.etcd_key."},
      {"membership.etcd_key", T::kString, "", "The private key of membership.etcd_cert."},
      {"membership.ttl", T::kDuration, "3s",
       "A cache node's lease in etcd: it leaves the membership this long after it stops renewing "
       "(it died or lost etcd); renewed every third of it."},
  };
}

CacheMembershipOptions CacheMembershipFromConfig(const Config& c) {
  CacheMembershipOptions o;
  o.etcd_endpoints = c.GetStringList("membership.etcd_endpoints");
  o.prefix = c.GetString("membership.etcd_prefix");
  o.etcd_tls.ca_file = c.GetString("membership.etcd_ca");
  o.etcd_tls.cert_file = c.GetString("membership.etcd_cert");
  o.etcd_tls.key_file = c.GetString("membership.etcd_key");
  o.ttl = c.GetDuration("membership.ttl");
  return o;
}

namespace {

absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> Client(const CacheMembershipOptions& options) {
  if (options.etcd_endpoints.empty() || options.prefix.empty() || options.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "cache membership: needs etcd endpoints, a prefix and a ttl of at least 1s");
  }
  etcd::EtcdOptions eo;
  eo.endpoints = options.etcd_endpoints;
  eo.tls = options.etcd_tls;
  // A renewal every ttl/3 must not wait on one dead member for longer than that.
  eo.timeout = options.ttl / 4;
  return etcd::EtcdClient::Create(eo);  // reads the TLS files; connects lazily
}

}  // namespace

absl::Status CheckCacheMembership(const CacheMembershipOptions& options) {
  absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> client = Client(options);
  if (client.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("membership.etcd_*: ", client.status().message()));
}

absl::StatusOr<std::unique_ptr<CacheMembership>> CacheMembership::Start(
    const CacheMembershipOptions& options, std::string announce, OnChange on_change) {
  std::unique_ptr<CacheMembership> m(new CacheMembership());
  ASSIGN_OR_RETURN(m->client_, Client(options));
  const std::string prefix = absl::StrCat(options.prefix, "cache/");
  if (!announce.empty()) {
    ASSIGN_OR_RETURN(m->announcement_,
                     etcd::Announcement::Start(m->client_.get(), absl::StrCat(prefix, announce),
                                               announce, options.ttl));
  }
  ASSIGN_OR_RETURN(m->watch_, etcd::PrefixWatch::Start(
                                  m->client_.get(), prefix,
                                  [on_change = std::move(on_change)](const etcd::KeyValues& kv) {
                                    std::vector<std::string> addresses;  // in key order: sorted
                                    for (const auto& [key, address] : kv)
                                      addresses.push_back(address);
                                    on_change(addresses);
                                  },
                                  options.ttl / 3));
  return m;
}

CacheMembership::~CacheMembership() {
  watch_.reset();
  announcement_.reset();
}

bool CacheMembership::announced() const {
  return announcement_ != nullptr && announcement_->announced();
}

}  // namespace glimpse::cluster

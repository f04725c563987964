#include "core/cluster/etcd_membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {

std::vector<ConfigKey> EtcdMembershipKeys() {
  using T = ConfigType;
  return {
      {"membership.etcd_endpoints", T::kStringList, "",
       "etcd members' client addresses (host:port,...): cache nodes and workers announce "
       "themselves there on a lease (membership.ttl); workers and cache nodes place states over "
       "the cache nodes alive there (cache_node and replication.peers serve until etcd first "
       "answers), and the leading coordinator declares a worker dead when its announcement ends. "
       "Empty: the configured lists and heartbeats."},
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
       "A node's lease in etcd: it leaves the membership this long after it stops renewing (it "
       "died or lost etcd); renewed every third of it."},
  };
}

EtcdMembershipOptions EtcdMembershipFromConfig(const Config& c) {
  EtcdMembershipOptions o;
  o.etcd_endpoints = c.GetStringList("membership.etcd_endpoints");
  o.prefix = c.GetString("membership.etcd_prefix");
  o.etcd_tls.ca_file = c.GetString("membership.etcd_ca");
  o.etcd_tls.cert_file = c.GetString("membership.etcd_cert");
  o.etcd_tls.key_file = c.GetString("membership.etcd_key");
  o.ttl = c.GetDuration("membership.ttl");
  return o;
}

namespace {

absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> Client(const EtcdMembershipOptions& options) {
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

absl::Status CheckEtcdMembership(const EtcdMembershipOptions& options) {
  absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> client = Client(options);
  if (client.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("membership.etcd_*: ", client.status().message()));
}

absl::StatusOr<std::unique_ptr<EtcdMembership>> EtcdMembership::Start(
    const EtcdMembershipOptions& options, OnChange on_cache_nodes) {
  std::unique_ptr<EtcdMembership> m(new EtcdMembership(options));
  ASSIGN_OR_RETURN(m->client_, Client(options));
  if (on_cache_nodes == nullptr) return m;
  ASSIGN_OR_RETURN(m->watch_,
                   etcd::PrefixWatch::Start(
                       m->client_.get(), absl::StrCat(options.prefix, "cache/"),
                       [on_change = std::move(on_cache_nodes)](const etcd::KeyValues& kv) {
                         std::vector<std::string> addresses;  // in key order: sorted
                         for (const auto& [key, address] : kv) addresses.push_back(address);
                         on_change(addresses);
                       },
                       options.ttl / 3));
  return m;
}

absl::Status EtcdMembership::Announce(const std::string& role, const std::string& name,
                                      const std::string& value) {
  absl::MutexLock lock(&mu_);
  if (announcement_ != nullptr) return absl::FailedPreconditionError("announced already");
  ASSIGN_OR_RETURN(announcement_, etcd::Announcement::Start(
                                      client_.get(), absl::StrCat(options_.prefix, role, "/", name),
                                      value, options_.ttl));
  return absl::OkStatus();
}

EtcdMembership::~EtcdMembership() {
  watch_.reset();
  absl::MutexLock lock(&mu_);
  announcement_.reset();
}

bool EtcdMembership::announced() const {
  absl::MutexLock lock(&mu_);
  return announcement_ != nullptr && announcement_->announced();
}

std::string WorkerAnnouncement(const std::string& node_id, const std::string& incarnation) {
  return absl::StrCat(node_id, "/", incarnation);
}

std::optional<std::pair<std::string, std::string>> ParseWorkerAnnouncement(
    std::string_view key_past_role) {
  const size_t slash = key_past_role.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == key_past_role.size()) {
    return std::nullopt;
  }
  return std::make_pair(std::string(key_past_role.substr(0, slash)),
                        std::string(key_past_role.substr(slash + 1)));
}

}  // namespace glimpse::cluster

// glimpse-cache-node: flags and wiring only (docs/cache_node.md; cache_node_service.h).
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cache-node/cache_node_grpc.h"
#include "cache-node/cache_node_metrics.h"
#include "cache-node/cache_node_service.h"
#include "cache-node/replicator.h"
#include "core/cluster/etcd_membership.h"
#include "core/cluster/membership_config.h"
#include "core/common/clock.h"
#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/ucx/ucx_transport.h"

namespace glimpse::cache_node {
namespace {

std::vector<ConfigKey> Keys() {
  std::vector<ConfigKey> keys = {
      {"storage.path", ConfigType::kString, "", "RocksDB directory (created if missing).", true},
      {"storage.sync_every_put", ConfigType::kBool, "true",
       "fsync the WAL before acknowledging each put (false: WAL written, not synced)."},
      {"storage.write_buffer", ConfigType::kBytes, "64MiB",
       "RocksDB memtable size per column family."},
      {"storage.block_cache", ConfigType::kBytes, "256MiB", "RocksDB block cache."},
      {"storage.min_free_bytes", ConfigType::kBytes, "1MiB",
       "Refuse to start when the disk has less free space (RESOURCE_EXHAUSTED, disk full)."},
      {"warm.bytes", ConfigType::kBytes, "1GiB", "Warm (in-memory) tier budget, page bytes."},
      {"warm.half_life", ConfigType::kDuration, "60s",
       "Recency half-life of the warm tier's importance x recency score."},
      {"retention.max_age", ConfigType::kDuration, "0s",
       "Unpinned states older than this are dropped (0s: no age limit)."},
      {"retention.max_bytes", ConfigType::kBytes, "0",
       "Cold tier limit, page bytes; oldest unpinned states make room (0: no limit)."},
      {"retention.sweep_interval", ConfigType::kDuration, "10s", "How often max_age is applied."},
      {"retention.tombstone_ttl", ConfigType::kDuration, "1h",
       "With replication: how long a state deleted on request is remembered (about 100 bytes "
       "each, in memory and RocksDB), so that replication does not copy an older copy of it back "
       "(a node down for longer returns with copies that come back)."},
      {"pin.max_bytes_per_namespace", ConfigType::kBytes, "1GiB",
       "Pinned page bytes per namespace (a tenant's states under one model and policy) at most; "
       "a Pin past it is RESOURCE_EXHAUSTED. 0: no limit."},
      {"put.max_state_bytes", ConfigType::kBytes, "4GiB", "Largest state one put may carry."},
      {"put.max_pages", ConfigType::kInt, "1048576", "Most pages one put may carry."},
      {"put.max_tokens", ConfigType::kInt, "4194304", "Most tokens in one put or lookup."},
      {"put.ticket_timeout", ConfigType::kDuration, "30s",
       "A put's pages must arrive and be committed within this after BeginPut."},
      {"transport.max_inflight", ConfigType::kBytes, "1GiB", "Bound on bytes being sent."},
      {"transport.receive_pool", ConfigType::kBytes, "512MiB", "Receive buffer pool."},
      {"replication.peers", ConfigType::kStringList, "",
       "Every cache node's gRPC host:port, as the workers' cache_node lists them (this one's "
       "included): keep each stored state on its replication.replicas owners (replicator.h). "
       "With membership.etcd_endpoints, the live cache nodes replace it once etcd answers. "
       "Empty without etcd: off."},
      {"replication.self", ConfigType::kString, "",
       "This node's entry in replication.peers (default: advertise_host and the gRPC port)."},
      {"replication.replicas", ConfigType::kInt, "2",
       "Copies of each state: the workers' cache_replicas."},
      {"replication.interval", ConfigType::kDuration, "30s",
       "Pause between scans of the stored states (a scan asks each other owner of each state "
       "whether it holds it: one small call per state and owner)."},
      {"replication.repair_delay", ConfigType::kDuration, "0s",
       "A peer gone (from the live nodes, or failing calls) for less than this keeps its share: "
       "no stand-in copies meanwhile, so a restarting node comes back to its states rather than "
       "having them moved away and back (they stay short of replicas meanwhile). 0s: at once."},
      {"replication.rate", ConfigType::kBytes, "64MiB",
       "Bytes per second the copies of repair and rebalance may take."},
  };
  for (ConfigKey& k : cluster::MembershipKeys("cache")) keys.push_back(k);
  for (ConfigKey& k : cluster::EtcdMembershipKeys()) keys.push_back(k);
  for (ConfigKey& k : ClientTlsKeys("the coordinator")) keys.push_back(k);
  return keys;
}

class Running final : public RunningService {
 public:
  explicit Running(std::unique_ptr<CacheNodeService> s)
      : service_(std::move(s)), grpc_(service_.get()) {}
  std::vector<grpc::Service*> grpc_services() override { return {&grpc_}; }
  // Registers once the gRPC port is known; heartbeats report stored bytes and pending puts. The
  // replicator starts then too (its default self is this address), and with etcd membership the
  // node announces that address and the replicator follows the live nodes.
  void OnServing(int grpc_port, int) override {
    if (replication.self.empty()) replication.self = absl::StrCat(advertise_host, ":", grpc_port);
    if (replication_transport != nullptr) StartReplication();
    if (!membership.etcd_endpoints.empty()) {
      absl::StatusOr<std::unique_ptr<cluster::EtcdMembership>> m =
          cluster::EtcdMembership::Start(membership, [this](const std::vector<std::string>& live) {
            absl::MutexLock lock(&replicator_mu_);
            if (replicator_ == nullptr) return;
            if (absl::Status st = replicator_->SetPeers(live); !st.ok()) {
              log::Error("replication: the peers are unchanged", {{"error", st.ToString()}});
            }
          });
      if (m.ok()) {
        if (absl::Status st = (*m)->Announce("cache", replication.self, replication.self);
            !st.ok()) {
          log::Error("this node is not announced on etcd", {{"error", st.ToString()}});
        }
        absl::MutexLock lock(&membership_mu_);
        membership_ = *std::move(m);
      } else {  // CheckEtcdMembership passed at start: not a configuration error
        log::Error("this node is not announced on etcd", {{"error", m.status().ToString()}});
      }
    }
    CacheNodeService* service = service_.get();
    auto load = [service] {
      const CacheNodeStats s = service->Stats();
      v1::NodeLoad l;
      l.set_queue_length(s.pending_puts);
      l.set_used_bytes(s.stored_bytes);
      return l;
    };
    // A cache node holds no leases: nothing to release.
    link_ = cluster::RegisterWhenServing(link, grpc_port, load, [](const std::string&) {});
  }
  // Leaves the membership before the server drains: workers place no more states here.
  void OnShutdown() override {
    absl::MutexLock lock(&membership_mu_);
    membership_.reset();
  }
  void Stop() override {
    OnShutdown();
    std::unique_ptr<Replicator> replicator;
    {
      absl::MutexLock lock(&replicator_mu_);
      replicator.swap(replicator_);
    }
    replicator.reset();
    link_.reset();
    service_->Stop();
  }
  CacheNodeService* service() { return service_.get(); }
  // Replication's counters; nullopt while it is off.
  std::optional<ReplicatorStats> replication_stats() {
    absl::MutexLock lock(&replicator_mu_);
    if (replicator_ == nullptr) return std::nullopt;
    return replicator_->stats();
  }

  cluster::CoordinatorLinkOptions link;  // all but the gRPC port
  ReplicatorOptions replication;
  std::unique_ptr<transport::Transport> replication_transport;  // null: no replication
  cluster::EtcdMembershipOptions membership;
  std::string advertise_host;

 private:
  void StartReplication() {
    absl::StatusOr<std::unique_ptr<Replicator>> r =
        Replicator::Start(replication, service_.get(), std::move(replication_transport));
    if (!r.ok()) {
      log::Error("replication is off: it could not start", {{"error", r.status().ToString()}});
      return;
    }
    absl::MutexLock lock(&replicator_mu_);
    replicator_ = *std::move(r);
  }

  std::unique_ptr<cluster::CoordinatorLink> link_;
  absl::Mutex membership_mu_;  // OnServing and OnShutdown may run on different threads
  std::unique_ptr<cluster::EtcdMembership> membership_ ABSL_GUARDED_BY(membership_mu_);
  absl::Mutex replicator_mu_;
  std::unique_ptr<Replicator> replicator_ ABSL_GUARDED_BY(replicator_mu_);
  std::unique_ptr<CacheNodeService> service_;
  CacheNodeGrpc grpc_;
};

// What the node offers the cluster: its cold tier's limit, else the size of the disk under it.
int64_t CapacityBytes(const CacheNodeOptions& o) {
  if (o.retention.max_bytes > 0) return static_cast<int64_t>(o.retention.max_bytes);
  struct statvfs fs {};
  if (statvfs(o.storage.path.c_str(), &fs) != 0) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(fs.f_blocks) * fs.f_frsize);
}

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& c,
                                                      metrics::MetricsRegistry& registry) {
  CacheNodeOptions o;
  o.storage.path = c.GetString("storage.path");
  o.storage.sync = c.GetBool("storage.sync_every_put");
  o.storage.write_buffer_bytes = c.GetBytes("storage.write_buffer");
  o.storage.block_cache_bytes = c.GetBytes("storage.block_cache");
  o.storage.min_free_bytes = c.GetBytes("storage.min_free_bytes");
  o.warm_bytes = c.GetBytes("warm.bytes");
  o.warm_half_life = c.GetDuration("warm.half_life");
  o.retention.max_age = c.GetDuration("retention.max_age");
  o.retention.max_bytes = c.GetBytes("retention.max_bytes");
  o.retention_sweep_interval = c.GetDuration("retention.sweep_interval");
  // Tombstones matter only where copies move between nodes (replication).
  const bool replicated = !c.GetStringList("replication.peers").empty() ||
                          !c.GetStringList("membership.etcd_endpoints").empty();
  o.tombstone_ttl = replicated ? c.GetDuration("retention.tombstone_ttl") : absl::ZeroDuration();
  o.max_pinned_bytes_per_namespace = c.GetBytes("pin.max_bytes_per_namespace");
  o.limits.max_state_bytes = c.GetBytes("put.max_state_bytes");
  o.limits.max_pages = c.GetInt("put.max_pages");
  o.max_tokens = c.GetInt("put.max_tokens");
  o.ticket_timeout = c.GetDuration("put.ticket_timeout");
  transport::UcxOptions t;
  t.max_inflight_bytes = c.GetBytes("transport.max_inflight");
  t.receive_pool_bytes = c.GetBytes("transport.receive_pool");
  cluster::ApplyTransportKeys(c, &t);
  ASSIGN_OR_RETURN(const TlsFiles tls, ClientTlsFromConfig(c));
  ASSIGN_OR_RETURN(o.peers, cluster::PeerAllowlistFromConfig(c, tls));
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                   transport::CreateUcxTransport(t));
  transport = transport::RestrictToPeers(std::move(transport), o.peers);
  const std::string address = transport->LocalAddress();
  ASSIGN_OR_RETURN(std::unique_ptr<CacheNodeService> service,
                   CacheNodeService::Create(o, std::move(transport), Clock::Real()));
  auto running = std::make_unique<Running>(std::move(service));
  RegisterMetrics(registry, running->service());
  registry.AddCollector([r = running.get()](metrics::SampleWriter& w) {
    const std::optional<ReplicatorStats> s = r->replication_stats();
    if (!s.has_value()) return;
    w.Counter("glimpse_cache_node_replication_scans_total", "Scans of the stored states.", {},
              s->scans);
    w.Counter("glimpse_cache_node_replication_copied_states_total",
              "States copied to an owner that lacked them (repair, rebalance).", {},
              s->copied_states);
    w.Counter("glimpse_cache_node_replication_copied_bytes_total", "Page bytes copied.", {},
              s->copied_bytes);
    w.Counter("glimpse_cache_node_replication_dropped_states_total",
              "Copies dropped once every owner had the state.", {}, s->dropped_states);
    w.Counter("glimpse_cache_node_replication_deleted_states_total",
              "Copies deleted because an owner had deleted the state on request since.", {},
              s->deleted_states);
    w.Gauge("glimpse_cache_node_under_replicated_states",
            "States with fewer copies than replication.replicas, at the last scan.", {},
            s->under_replicated);
  });
  running->link = cluster::LinkOptionsFromConfig(c, v1::NODE_ROLE_CACHE, tls);
  running->link.ucx_address = address;
  running->advertise_host = c.GetString("advertise_host");
  ReplicatorOptions& r = running->replication;
  r.peers = c.GetStringList("replication.peers");
  r.self = c.GetString("replication.self");
  r.replicas = static_cast<int>(c.GetInt("replication.replicas"));
  r.interval = c.GetDuration("replication.interval");
  r.repair_delay = c.GetDuration("replication.repair_delay");
  r.bytes_per_second = c.GetBytes("replication.rate");
  r.tls = tls;
  running->membership = cluster::EtcdMembershipFromConfig(c);
  if (!running->membership.etcd_endpoints.empty()) {
    RETURN_IF_ERROR(cluster::CheckEtcdMembership(running->membership));
  }
  if (!r.peers.empty() || !running->membership.etcd_endpoints.empty()) {
    // The replicator's client engine to the peers, registered so that they accept its batches.
    ASSIGN_OR_RETURN(running->replication_transport, transport::CreateUcxTransport(t));
    running->link.client_ucx_addresses.push_back(running->replication_transport->LocalAddress());
  }
  running->link.capacity_bytes = CapacityBytes(o);
  return running;
}

}  // namespace
}  // namespace glimpse::cache_node

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-cache-node";
  spec.summary =
      "Glimpse cache node: keeps sessions' KV pages (retained and evicted) in RocksDB with a warm "
      "in-memory tier; gRPC for control, UCX for page bytes (UCX_TLS picks the transports).";
  spec.keys = glimpse::cache_node::Keys();
  spec.start = glimpse::cache_node::Start;
  return glimpse::RunServiceMain(spec, argc, argv);
}

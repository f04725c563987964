// The wiring glimpse-prefill-worker and glimpse-decode-worker share: their common config keys,
// the model, thread pool and cache node client they build from them, and their registration with
// the coordinator once the gRPC port is known.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache_client/cache_client.h"
#include "core/cluster/coordinator_link.h"
#include "core/cluster/etcd_membership.h"
#include "core/common/config.h"
#include "core/common/metrics.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/transport.h"
#include "core/transport/ucx/ucx_transport.h"
#include "core/worker/turn_steps.h"

namespace glimpse::worker {

// model, threads, kv_memory, cache_node, cache_timeout, cache_engines, page_tokens, recall_*,
// lookahead_module, eviction_profile, the membership keys (cluster/membership_config.h,
// cluster/etcd_membership.h) and client_tls.*. `role` names the default node id ("decode" →
// decode-<host>-<port>).
std::vector<ConfigKey> CommonWorkerKeys(std::string_view role);

struct WorkerBase {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<kernels::ThreadPool> pool;
  std::unique_ptr<cache_client::CacheClient> cache;  // null without cache_node or etcd membership
  // With membership.etcd_endpoints: keeps `cache`'s nodes the live cache nodes and announces the
  // worker (AnnounceWorker); declared after `cache`, so that it stops first.
  std::unique_ptr<cluster::EtcdMembership> membership;
  transport::UcxOptions transport;                  // for the worker's own engines
  std::shared_ptr<transport::PeerAllowlist> peers;  // null: engines accept any peer
  // All but ucx_address and capacity_bytes (the cache client's engines are client addresses);
  // grpc_address is the host.
  cluster::CoordinatorLinkOptions link;
  PrefillLimits limits;                    // recall settings from the config
  eviction::EvictionProfile profile;       // each method's settings (config key eviction_profile)
  std::unique_ptr<model::KvPool> kv_pool;  // every sequence's KV, kv_memory bytes
  int32_t prefill_chunk_tokens = 256;      // config prefill_chunk_tokens

  // A UCX engine of this worker, restricted to `peers`.
  absl::StatusOr<std::unique_ptr<transport::Transport>> NewEngine() const;
};

// With membership on etcd, announces the worker registered through `link` (its node id and
// incarnation): the leading coordinator declares it dead as soon as the announcement goes
// (cluster/etcd_membership.h). Nothing without either; errors are logged.
void AnnounceWorker(const WorkerBase& w, const cluster::CoordinatorLink* link);

// Exports the KV pool on /metrics: glimpse_<service>_kv_pool_bytes{state="budget|held|used"} and
// glimpse_<service>_kv_pool_pages{format, state="used|free"}.
void AddKvPoolMetrics(const WorkerBase& w, std::string_view service,
                      metrics::MetricsRegistry& registry);

// Exports the cache client's transports on /metrics, if there is a cache client:
// glimpse_<service>_cache_transport_{bytes_received,bytes_sent,receive_errors}_total{engine="i"}
// (service: "decode_worker" or "prefill_worker"), one series per engine (cache_engines), and
// glimpse_<service>_cache_nodes, the nodes it places states on.
void AddCacheClientMetrics(const WorkerBase& w, std::string_view service,
                           metrics::MetricsRegistry& registry);

// Loads the model (the default model, fetched if missing, when `model` is empty) and its eviction
// profile (eviction::ResolveProfile), makes the pool, the peer allowlist and the cache node client
// (over its own UCX engines).
absl::StatusOr<WorkerBase> StartWorkerBase(const Config& c, v1::NodeRole role);

}  // namespace glimpse::worker

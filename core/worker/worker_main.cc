#include "core/worker/worker_main.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cluster/membership_config.h"
#include "core/cluster/node_role.h"
#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/model/model_store.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/ucx/ucx_transport.h"

namespace glimpse::worker {
std::vector<ConfigKey> CommonWorkerKeys(std::string_view role) {
  std::vector<ConfigKey> keys = {
      {"model", ConfigType::kString, "",
       "GGUF model file (default: the default model, fetched if missing)."},
      {"threads", ConfigType::kInt, "0", "Compute threads (0: one per core)."},
      {"kv_memory", ConfigType::kBytes, "1GiB",
       "Memory for the KV of every sequence this worker holds (running turns and hot sessions), "
       "as pages in each session's codec; the coordinator learns it at registration."},
      {"cache_node", ConfigType::kStringList, "",
       "Cache node host:port for session states (empty: nothing loaded or stored, unless "
       "membership.etcd_endpoints lists the live ones); several, comma-separated: each state on "
       "cache_replicas of them, placed by rendezvous hashing."},
      {"cache_replicas", ConfigType::kInt, "2",
       "With several cache nodes: copies of each state (at most the number of nodes)."},
      {"cache_write_quorum", ConfigType::kInt, "0",
       "With several cache nodes: copies a store needs before it counts as stored (0: "
       "cache_replicas; at most the most nodes ever listed, so stores fail while fewer are "
       "alive). Fewer acknowledge states that fewer nodes hold: losing those loses them."},
      {"cache_timeout", ConfigType::kDuration, "10s",
       "Deadline of each cache node call; an unreachable node costs a turn at most this before "
       "it recomputes (lookups), or before its state goes unstored (stores)."},
      {"cache_engines", ConfigType::kInt, "2",
       "UCX engines the cache client receives on (1 to 4): concurrent loads are pulled by "
       "different engines, each moving its bytes on its own thread."},
      {"page_tokens", ConfigType::kInt, "64", "Tokens per KV page."},
      {"prefill_chunk_tokens", ConfigType::kInt, "256",
       "Tokens per prefill chunk: between a prompt's chunks, running decodes step (decode "
       "worker) or other prompts take their turn (prefill worker), so a long prompt holds them "
       "one chunk at a time (smaller: steadier streams; larger: faster prefill)."},
      {"recall_share", ConfigType::kDouble, "0.5",
       "Cold-page recall: entries earlier turns evicted that are offered back to each (layer, "
       "kv-head) per turn, as a share of its budget, best pages by key summary first (0: off)."},
      {"recall_page_tokens", ConfigType::kInt, "16",
       "Cold entries per summarised page when choosing what to recall."},
      {"lookahead_module", ConfigType::kString, "",
       "LookaheadKV module (.safetensors) for policy method \"lookahead\"; the learned gates' "
       "trained weights are read beside it (<module stem>.<gate>.safetensors)."},
      {"eviction_profile", ConfigType::kString, "",
       "Each eviction method's measured settings for this model (glimpse tune): a file, \"none\" "
       "for the built-in settings, or empty for the <module>.eviction.json beside "
       "lookahead_module when it exists."},
  };
  for (ConfigKey& k : cluster::MembershipKeys(role)) keys.push_back(k);
  for (ConfigKey& k : cluster::EtcdMembershipKeys()) keys.push_back(k);
  for (ConfigKey& k : ClientTlsKeys("the coordinator and the cache node")) keys.push_back(k);
  return keys;
}

absl::StatusOr<WorkerBase> StartWorkerBase(const Config& c, v1::NodeRole role) {
  WorkerBase w;
  ASSIGN_OR_RETURN(const TlsFiles tls, ClientTlsFromConfig(c));
  w.limits.recall_share = c.GetDouble("recall_share");
  w.limits.recall_page_tokens = c.GetInt("recall_page_tokens");
  if (!(w.limits.recall_share >= 0.0 && w.limits.recall_share <= 4.0) ||
      w.limits.recall_page_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("recall_share must be in [0, 4] and recall_page_tokens >= 1; got ",
                     w.limits.recall_share, " and ", w.limits.recall_page_tokens));
  }
  const int64_t kv_memory = c.GetBytes("kv_memory");
  const int64_t page_tokens = c.GetInt("page_tokens");
  if (kv_memory < 1 || page_tokens < 1 || page_tokens > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_memory must be positive and page_tokens in [1, 4096]; got ", kv_memory,
                     " and ", page_tokens));
  }
  const int64_t chunk = c.GetInt("prefill_chunk_tokens");
  if (chunk < 1 || chunk > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk_tokens must be in [1, 65536]; got ", chunk));
  }
  w.prefill_chunk_tokens = static_cast<int32_t>(chunk);
  const int64_t cache_engines = c.GetInt("cache_engines");
  if (cache_engines < 1 || cache_engines > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_engines must be 1 to 4; got ", cache_engines));
  }
  std::string path = c.GetString("model");
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(w.model, model::Model::Load(path));
  ASSIGN_OR_RETURN(
      w.profile, eviction::ResolveProfile(c.GetString("eviction_profile"),
                                          c.GetString("lookahead_module"), w.model->fingerprint()));
  log::Info("eviction profile", {{"source", w.profile.source()}});
  w.kv_pool = std::make_unique<model::KvPool>(
      model::KvPool::Options{.budget_bytes = kv_memory,
                             .page_tokens = static_cast<int32_t>(page_tokens),
                             .head_dim = w.model->config().head_dim});
  const int64_t threads = c.GetInt("threads");
  w.pool = std::make_unique<kernels::ThreadPool>(
      threads > 0 ? static_cast<int>(threads)
                  : static_cast<int>(std::thread::hardware_concurrency()));
  cluster::ApplyTransportKeys(c, &w.transport);
  ASSIGN_OR_RETURN(w.peers, cluster::PeerAllowlistFromConfig(c, tls));
  w.link = cluster::LinkOptionsFromConfig(c, role, tls);
  const cluster::EtcdMembershipOptions membership = cluster::EtcdMembershipFromConfig(c);
  if (!c.GetStringList("cache_node").empty() || !membership.etcd_endpoints.empty()) {
    std::vector<std::unique_ptr<transport::Transport>> transports;
    for (int64_t i = 0; i < cache_engines; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport, w.NewEngine());
      w.link.client_ucx_addresses.push_back(transport->LocalAddress());
      transports.push_back(std::move(transport));
    }
    cache_client::CacheClientOptions o;
    o.addresses = c.GetStringList("cache_node");
    o.replicas = static_cast<int>(c.GetInt("cache_replicas"));
    o.write_quorum = static_cast<int>(c.GetInt("cache_write_quorum"));
    o.timeout = c.GetDuration("cache_timeout");
    o.tls = tls;
    ASSIGN_OR_RETURN(w.cache, cache_client::CacheClient::Create(o, std::move(transports)));
  }
  if (!membership.etcd_endpoints.empty()) {
    cluster::EtcdMembership::OnChange follow = nullptr;
    if (w.cache != nullptr) {
      follow = [cache = w.cache.get()](const std::vector<std::string>& live) {
        if (absl::Status st = cache->SetNodes(live); !st.ok()) {
          log::Error("cache membership: the node list is unchanged", {{"error", st.ToString()}});
        }
      };
    }
    ASSIGN_OR_RETURN(w.membership, cluster::EtcdMembership::Start(membership, std::move(follow)));
  }
  return w;
}

void AnnounceWorker(const WorkerBase& w, const cluster::CoordinatorLink* link) {
  if (w.membership == nullptr || link == nullptr) return;
  const cluster::CoordinatorLinkOptions& o = link->options();
  const absl::Status st = w.membership->Announce(
      std::string(cluster::NodeRoleName(o.role)),
      cluster::WorkerAnnouncement(o.node_id, link->incarnation()), o.grpc_address);
  if (!st.ok()) log::Error("this worker is not announced on etcd", {{"error", st.ToString()}});
}

void AddKvPoolMetrics(const WorkerBase& w, std::string_view service,
                      metrics::MetricsRegistry& registry) {
  const std::string prefix = absl::StrCat("glimpse_", std::string(service), "_kv_pool_");
  registry.AddCollector([pool = w.kv_pool.get(), prefix](metrics::SampleWriter& out) {
    const model::KvPool::Stats s = pool->stats();
    const std::string bytes_help =
        "KV pool bytes: the budget (kv_memory), what the pool holds, what sequences use.";
    out.Gauge(prefix + "bytes", bytes_help, {{"state", "budget"}},
              static_cast<double>(s.budget_bytes));
    out.Gauge(prefix + "bytes", bytes_help, {{"state", "held"}}, static_cast<double>(s.held_bytes));
    out.Gauge(prefix + "bytes", bytes_help, {{"state", "used"}}, static_cast<double>(s.used_bytes));
    for (int f = 0; f < model::kKvDTypes; ++f) {
      const char* format = model::KvDTypeName(static_cast<kernels::KvDType>(f));
      const std::string help = "KV pool pages by format: in use, and free for reuse.";
      out.Gauge(prefix + "pages", help, {{"format", format}, {"state", "used"}},
                static_cast<double>(s.used_pages[f]));
      out.Gauge(prefix + "pages", help, {{"format", format}, {"state", "free"}},
                static_cast<double>(s.free_pages[f]));
    }
  });
}

void AddCacheClientMetrics(const WorkerBase& w, std::string_view service,
                           metrics::MetricsRegistry& registry) {
  if (w.cache == nullptr) return;
  const std::string prefix = absl::StrCat("glimpse_", std::string(service), "_cache_transport_");
  const std::string nodes = absl::StrCat("glimpse_", std::string(service), "_cache_nodes");
  registry.AddCollector([cache = w.cache.get(), prefix, nodes](metrics::SampleWriter& out) {
    out.Gauge(nodes, "Cache nodes the cache client places states on (the live ones on etcd).", {},
              static_cast<double>(cache->nodes().size()));
    const std::vector<transport::Metrics> engines = cache->TransportMetrics();
    for (size_t i = 0; i < engines.size(); ++i) {
      const metrics::Labels engine = {{"engine", absl::StrCat(i)}};
      out.Counter(prefix + "bytes_received_total",
                  "Bytes the cache client's engine received (gets), by engine.", engine,
                  static_cast<double>(engines[i].bytes_received));
      out.Counter(prefix + "bytes_sent_total",
                  "Bytes the cache client's engine sent (puts), by engine.", engine,
                  static_cast<double>(engines[i].bytes_sent));
      out.Counter(prefix + "receive_errors_total",
                  "Get replies the cache client's engine failed to receive, by engine.", engine,
                  static_cast<double>(engines[i].receive_errors));
      out.Counter(prefix + "receives_deferred_total",
                  "Get reply pages held back by a local sender's receive window, by engine.",
                  engine, static_cast<double>(engines[i].receive_buffers_deferred));
      out.Gauge(prefix + "pending_batches",
                "Get replies announced, neither delivered nor failed yet, by engine.", engine,
                static_cast<double>(engines[i].receive_pending_batches));
      out.Counter(prefix + "receives_refused_total",
                  "Batches refused for the receive budget and oversized headers, by engine.",
                  engine, static_cast<double>(engines[i].receive_refused));
    }
  });
}

absl::StatusOr<std::unique_ptr<transport::Transport>> WorkerBase::NewEngine() const {
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> engine,
                   transport::CreateUcxTransport(transport));
  return transport::RestrictToPeers(std::move(engine), peers);
}

}  // namespace glimpse::worker

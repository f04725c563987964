// glimpse-decode-worker: flags and wiring only (README "Decode worker"; turn_runner.h).
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/transport/ucx/ucx_transport.h"
#include "decode-worker/coordinator_link.h"
#include "decode-worker/decode_worker_grpc.h"

namespace glimpse::decode_worker {
namespace {

std::vector<ConfigKey> Keys() {
  std::vector<ConfigKey> keys = {
      {"model", ConfigType::kString, "",
       "GGUF model file (default: the default model, fetched if missing)."},
      {"threads", ConfigType::kInt, "0", "Compute threads (0: one per core)."},
      {"node_id", ConfigType::kString, "",
       "Id registered with the coordinator (default decode-<host>-<port>)."},
      {"advertise_host", ConfigType::kString, "127.0.0.1",
       "Host the coordinator hands out for this worker's gRPC port."},
      {"coordinator", ConfigType::kString, "",
       "Coordinator host:port to register with and heartbeat (empty: standalone)."},
      {"cache_node", ConfigType::kString, "",
       "Cache node host:port for session states (empty: nothing stored, no warm hits)."},
      {"cache_timeout", ConfigType::kDuration, "10s",
       "Deadline of each cache node call; an unreachable node costs a turn at most this before "
       "it recomputes (lookups), or before its state stays hot only (stores)."},
      {"capacity", ConfigType::kBytes, "1GiB", "Memory for hot sessions' KV."},
      {"max_output_tokens", ConfigType::kInt, "4096", "Largest sampling.max_tokens accepted."},
      {"page_tokens", ConfigType::kInt, "64", "Tokens per KV page written to the cache node."},
      {"lookahead_module", ConfigType::kString, "",
       "LookaheadKV module (.safetensors) for policy method \"lookahead\"."},
      {"transport.allow_no_peer_failure_detection", ConfigType::kBool, "false",
       "Accept UCX shared-memory-only endpoints (cannot detect a dead peer)."},
  };
  for (ConfigKey& k : ClientTlsKeys("the coordinator and the cache node")) keys.push_back(k);
  return keys;
}

class Running final : public RunningService {
 public:
  std::vector<grpc::Service*> grpc_services() override { return {grpc_.get()}; }
  void Stop() override { link_.reset(); }

  std::unique_ptr<model::Model> model;
  std::unique_ptr<kernels::ThreadPool> pool;
  std::unique_ptr<cache_client::CacheClient> cache;
  std::unique_ptr<HotSessions> hot;
  std::unique_ptr<TurnRunner> runner;
  std::unique_ptr<DecodeWorkerGrpc> grpc_;
  std::unique_ptr<CoordinatorLink> link_;
  CoordinatorLinkOptions link_options;
};

// Filled by Start, read by the on_serving hook (which knows the bound port).
Running* g_running = nullptr;
std::string g_coordinator;

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& c,
                                                      metrics::MetricsRegistry& registry) {
  auto r = std::make_unique<Running>();
  ASSIGN_OR_RETURN(const TlsFiles tls, ClientTlsFromConfig(c));
  std::string path = c.GetString("model");
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(r->model, model::Model::Load(path));
  const int64_t threads = c.GetInt("threads");
  r->pool = std::make_unique<kernels::ThreadPool>(
      threads > 0 ? static_cast<int>(threads)
                  : static_cast<int>(std::thread::hardware_concurrency()));
  transport::Options t;
  t.allow_no_peer_failure_detection = c.GetBool("transport.allow_no_peer_failure_detection");
  std::string ucx_address;
  if (!c.GetString("cache_node").empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                     transport::CreateUcxTransport(t));
    ucx_address = transport->LocalAddress();
    cache_client::CacheClientOptions o;
    o.address = c.GetString("cache_node");
    o.timeout = c.GetDuration("cache_timeout");
    o.tls = tls;
    ASSIGN_OR_RETURN(r->cache, cache_client::CacheClient::Create(o, std::move(transport)));
  }
  r->hot = std::make_unique<HotSessions>(c.GetBytes("capacity"));
  TurnRunnerOptions o;
  o.page_tokens = c.GetInt("page_tokens");
  o.max_output_tokens = static_cast<int32_t>(c.GetInt("max_output_tokens"));
  o.lookahead_module = c.GetString("lookahead_module");
  r->runner = std::make_unique<TurnRunner>(*r->model, *r->pool, r->cache.get(), *r->hot, o);
  r->grpc_ = std::make_unique<DecodeWorkerGrpc>(*r->runner, *r->hot, registry);
  r->link_options.coordinator_address = c.GetString("coordinator");
  r->link_options.tls = tls;
  r->link_options.node_id = c.GetString("node_id");
  r->link_options.grpc_address = c.GetString("advertise_host");
  r->link_options.ucx_address = ucx_address;
  r->link_options.capacity_bytes = c.GetBytes("capacity");
  g_running = r.get();
  return r;
}

// Registers once the gRPC port is known.
void OnServing(int grpc_port, int) {
  Running* r = g_running;
  if (r == nullptr || r->link_options.coordinator_address.empty()) return;
  CoordinatorLinkOptions o = r->link_options;
  o.grpc_address = absl::StrCat(o.grpc_address, ":", grpc_port);
  if (o.node_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    o.node_id = absl::StrCat("decode-", host, "-", grpc_port);
  }
  HotSessions* hot = r->hot.get();
  auto load = [hot] {
    const HotStats s = hot->Stats();
    v1::NodeLoad l;
    l.set_queue_length(s.busy);
    l.set_used_bytes(s.bytes);
    l.set_hot_sessions(s.sessions);
    return l;
  };
  auto release = [hot](const std::string& session) {
    const int64_t freed = hot->Release(session);
    log::Info("session released by the coordinator",
              {{"session", session}, {"freed_bytes", static_cast<long long>(freed)}});
  };
  absl::StatusOr<std::unique_ptr<CoordinatorLink>> link = CoordinatorLink::Start(o, load, release);
  if (!link.ok()) {
    log::Error("cannot reach the coordinator", {{"error", link.status().ToString()}});
    return;
  }
  r->link_ = std::move(*link);
}

}  // namespace
}  // namespace glimpse::decode_worker

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-decode-worker";
  spec.summary =
      "Glimpse decode worker: runs sessions' turns — continues from the hot copy, a cache node's "
      "stored state or nothing, prefills with the session's eviction policy, streams tokens, and "
      "writes the new state to a cache node at turn end.";
  spec.keys = glimpse::decode_worker::Keys();
  spec.start = glimpse::decode_worker::Start;
  spec.on_serving = glimpse::decode_worker::OnServing;
  return glimpse::RunServiceMain(spec, argc, argv);
}

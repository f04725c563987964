// glimpse-decode-worker: flags and wiring only (docs/workers.md "Decode worker";
// core/worker/turn_runner.h).
#include <memory>
#include <thread>

#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/worker/worker_main.h"
#include "decode-worker/decode_worker_grpc.h"

namespace glimpse::decode_worker {
namespace {

std::vector<ConfigKey> Keys() {
  std::vector<ConfigKey> keys = worker::CommonWorkerKeys("decode");
  keys.push_back({"delivery_timeout", ConfigType::kDuration, "10s",
                  "How long a turn waits for its prefill worker's delivery before it prefills "
                  "alone."});
  keys.push_back(
      {"max_output_tokens", ConfigType::kInt, "4096", "Largest sampling.max_tokens accepted."});
  keys.push_back({"store_retry", ConfigType::kDuration, "5s",
                  "How long a turn's state write retries a cache node that is unavailable "
                  "(restarting) before the turn ends with its state hot only."});
  keys.push_back({"idle_reencode", ConfigType::kBool, "true",
                  "When a turn needs KV pool room, re-encode idle hot sessions held in int8 or "
                  "fp8 into kivi4 (where smaller) before dropping any."});
  return keys;
}

class Running final : public RunningService {
 public:
  std::vector<grpc::Service*> grpc_services() override { return {grpc_.get()}; }
  // Registers once the gRPC port is known.
  void OnServing(int grpc_port, int) override {
    worker::HotSessions* hot_sessions = hot.get();
    const model::KvPool* kv_pool = base.kv_pool.get();
    auto load = [hot_sessions, kv_pool] {
      const worker::HotStats s = hot_sessions->Stats();
      v1::NodeLoad l;
      l.set_queue_length(s.busy);
      // The pool's pages in use: idle hot copies and running turns alike (capacity = kv_memory).
      l.set_used_bytes(kv_pool->stats().used_bytes);
      l.set_hot_sessions(s.sessions);
      return l;
    };
    auto release = [hot_sessions](const std::string& session) {
      const int64_t freed = hot_sessions->Release(session);
      log::Info("session released by the coordinator",
                {{"session", session}, {"freed_bytes", static_cast<long long>(freed)}});
    };
    link_ = cluster::RegisterWhenServing(base.link, grpc_port, load, release);
    worker::AnnounceWorker(base, link_.get());
  }
  // After the drain: deregistered first, so that the end of its announcement on etcd (which
  // declares it dead) does not make the link register it again.
  void Stop() override {
    link_.reset();
    base.membership.reset();
  }

  worker::WorkerBase base;
  std::unique_ptr<worker::DeliveryInbox> inbox;
  std::unique_ptr<worker::HotSessions> hot;
  std::unique_ptr<worker::TurnRunner> runner;
  std::unique_ptr<DecodeWorkerGrpc> grpc_;

 private:
  std::unique_ptr<cluster::CoordinatorLink> link_;
};

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& c,
                                                      metrics::MetricsRegistry& registry) {
  auto r = std::make_unique<Running>();
  ASSIGN_OR_RETURN(r->base, worker::StartWorkerBase(c, v1::NODE_ROLE_DECODE));
  worker::AddCacheClientMetrics(r->base, "decode_worker", registry);
  worker::AddKvPoolMetrics(r->base, "decode_worker", registry);
  // Prefill workers ship to the inbox's own transport (the address the coordinator hands out).
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> inbox, r->base.NewEngine());
  r->inbox = std::make_unique<worker::DeliveryInbox>(std::move(inbox));
  registry.AddCollector([inbox = r->inbox.get()](metrics::SampleWriter& w) {
    const worker::DeliveryInboxStats s = inbox->Stats();
    for (const auto& [outcome, n] :
         {std::pair{"received", s.received}, std::pair{"rejected", s.rejected},
          std::pair{"dropped", s.dropped}}) {
      w.Counter("glimpse_decode_worker_deliveries_total",
                "Prefill deliveries by outcome: received, rejected (malformed or from an "
                "unregistered peer), dropped (no turn took them in time).",
                {{"outcome", outcome}}, static_cast<double>(n));
    }
    w.Counter("glimpse_decode_worker_transport_peers_refused_total",
              "Batches refused because the sender is not registered with the coordinator.", {},
              static_cast<double>(s.peers_refused));
  });
  r->hot =
      std::make_unique<worker::HotSessions>(c.GetBytes("kv_memory"), c.GetBool("idle_reencode"));
  worker::TurnRunnerOptions o;
  o.page_tokens = c.GetInt("page_tokens");
  o.limits = r->base.limits;
  o.max_output_tokens = static_cast<int32_t>(c.GetInt("max_output_tokens"));
  o.prefill_chunk_tokens = r->base.prefill_chunk_tokens;
  o.lookahead_module = c.GetString("lookahead_module");
  o.profile = r->base.profile;
  o.kv_pool = r->base.kv_pool.get();
  o.delivery_timeout = c.GetDuration("delivery_timeout");
  o.store_retry = c.GetDuration("store_retry");
  r->runner = std::make_unique<worker::TurnRunner>(
      *r->base.model, *r->base.pool,
      worker::TurnParts{.cache = r->base.cache.get(), .hot = r->hot.get(), .inbox = r->inbox.get()},
      o);
  r->grpc_ = std::make_unique<DecodeWorkerGrpc>(*r->runner, *r->hot, registry);
  r->base.link.ucx_address = r->inbox->address();
  r->base.link.capacity_bytes = c.GetBytes("kv_memory");
  return r;
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
  return glimpse::RunServiceMain(spec, argc, argv);
}

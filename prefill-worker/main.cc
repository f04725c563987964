// glimpse-prefill-worker: flags and wiring only (docs/workers.md "Prefill worker";
// core/worker/turn_runner.h).
#include <memory>

#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/worker/worker_main.h"
#include "prefill-worker/prefill_worker_grpc.h"

namespace glimpse::prefill_worker {
namespace {

std::vector<ConfigKey> Keys() {
  std::vector<ConfigKey> keys = worker::CommonWorkerKeys("prefill");
  keys.push_back({"ship_timeout", ConfigType::kDuration, "30s",
                  "Deadline of shipping a delivery to a decode worker."});
  return keys;
}

class Running final : public RunningService {
 public:
  std::vector<grpc::Service*> grpc_services() override { return {grpc_.get()}; }
  // Registers once the gRPC port is known.
  void OnServing(int grpc_port, int) override {
    PrefillWorkerGrpc* service = grpc_.get();
    auto load = [service] {
      v1::NodeLoad l;
      l.set_queue_length(service->queue_length());
      return l;
    };
    auto release = [](const std::string&) {};  // a prefill worker holds no session
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
  std::unique_ptr<transport::Transport> ship;
  std::unique_ptr<worker::TurnRunner> runner;
  std::unique_ptr<PrefillWorkerGrpc> grpc_;

 private:
  std::unique_ptr<cluster::CoordinatorLink> link_;
};

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& c,
                                                      metrics::MetricsRegistry& registry) {
  auto r = std::make_unique<Running>();
  ASSIGN_OR_RETURN(r->base, worker::StartWorkerBase(c, v1::NODE_ROLE_PREFILL));
  worker::AddCacheClientMetrics(r->base, "prefill_worker", registry);
  worker::AddKvPoolMetrics(r->base, "prefill_worker", registry);
  ASSIGN_OR_RETURN(r->ship, r->base.NewEngine());
  worker::TurnRunnerOptions o;
  o.page_tokens = c.GetInt("page_tokens");
  o.limits = r->base.limits;
  o.lookahead_module = c.GetString("lookahead_module");
  o.profile = r->base.profile;
  o.kv_pool = r->base.kv_pool.get();
  o.ship_timeout = c.GetDuration("ship_timeout");
  o.prefill_chunk_tokens = r->base.prefill_chunk_tokens;
  r->runner = std::make_unique<worker::TurnRunner>(
      *r->base.model, *r->base.pool,
      worker::TurnParts{.cache = r->base.cache.get(), .ship = r->ship.get()}, o);
  r->grpc_ = std::make_unique<PrefillWorkerGrpc>(*r->runner, registry);
  r->base.link.ucx_address = r->ship->LocalAddress();
  return r;
}

}  // namespace
}  // namespace glimpse::prefill_worker

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-prefill-worker";
  spec.summary =
      "Glimpse prefill worker: prefills a turn's prompt with the session's eviction policy "
      "(continuing from a cache node's stored prefix), stores the kept and evicted pages on a "
      "cache node and ships the kept pages to the decode worker over UCX.";
  spec.keys = glimpse::prefill_worker::Keys();
  spec.start = glimpse::prefill_worker::Start;
  return glimpse::RunServiceMain(spec, argc, argv);
}

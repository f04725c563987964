// glimpse-coordinator: flags and wiring only (docs/coordinator.md).
#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_config.h"
#include "coordinator/coordinator_grpc.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/rocks_state_store.h"
#include "core/common/clock.h"
#include "core/common/grpc/service_main.h"
#include "core/common/status_macros.h"

namespace glimpse::coordinator {
namespace {

class RunningCoordinator : public RunningService {
 public:
  RunningCoordinator(std::unique_ptr<StateStore> store, std::unique_ptr<CoordinatorService> service,
                     absl::Duration tick, std::shared_ptr<HealthLatch> health)
      : store_(std::move(store)),
        service_(std::move(service)),
        grpc_(service_.get()),
        health_(std::move(health)) {
    ticker_ = std::thread([this, tick] {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        cv_.WaitWithTimeout(&mu_, tick);
        if (!stop_) service_->Tick();
      }
    });
  }
  ~RunningCoordinator() override { Stop(); }

  std::vector<grpc::Service*> grpc_services() override { return {&grpc_}; }
  // A store write that failed makes the coordinator NOT_SERVING (it refuses every change).
  void SetHealthReporter(std::function<void(bool)> report) override {
    health_->Attach(std::move(report));
  }
  void Stop() override {
    health_->Detach();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.SignalAll();
    ticker_.join();
    (void)service_->Flush();
  }
  CoordinatorService* service() { return service_.get(); }

 private:
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<CoordinatorService> service_;
  CoordinatorGrpc grpc_;
  const std::shared_ptr<HealthLatch> health_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stop_ is set
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ticker_;
};

void RegisterMetrics(CoordinatorService* service, metrics::MetricsRegistry& registry) {
  registry.AddCollector([service](metrics::SampleWriter& w) {
    CoordinatorStats s = service->Stats();
    w.Gauge("glimpse_coordinator_nodes", "Nodes by liveness.", {{"state", "alive"}}, s.nodes_alive);
    w.Gauge("glimpse_coordinator_nodes", "Nodes by liveness.", {{"state", "dead"}}, s.nodes_dead);
    const char* kSessions = "Sessions by tier.";
    w.Gauge("glimpse_coordinator_sessions", kSessions, {{"tier", "active"}}, s.sessions_active);
    w.Gauge("glimpse_coordinator_sessions", kSessions, {{"tier", "leased"}}, s.sessions_leased);
    w.Gauge("glimpse_coordinator_sessions", kSessions, {{"tier", "warm"}}, s.sessions_warm);
    w.Gauge("glimpse_coordinator_reserved_bytes", "KV bytes reserved on live decode workers.", {},
            s.reserved_bytes);
    w.Gauge("glimpse_coordinator_capacity_bytes", "KV capacity of live decode workers.", {},
            s.capacity_bytes);
    w.Gauge("glimpse_coordinator_admission_queue", "Turns waiting for memory.", {}, s.queued);
    w.Counter("glimpse_coordinator_routes_total", "Turns routed.", {}, s.routes);
    w.Counter("glimpse_coordinator_hot_hits_total", "Turns routed to a hot copy.", {}, s.hot_hits);
    w.Counter("glimpse_coordinator_rejected_total", "RESOURCE_EXHAUSTED answers.", {}, s.rejected);
    w.Counter("glimpse_coordinator_turns_timed_out_total", "Turns never ended in time.", {},
              s.turns_timed_out);
    w.Counter("glimpse_coordinator_sessions_forgotten_total", "Idle warm sessions dropped.", {},
              s.sessions_forgotten);
    w.Counter("glimpse_coordinator_nodes_forgotten_total",
              "Nodes dead for membership.forget_dead_after, dropped.", {}, s.nodes_forgotten);
    w.Counter("glimpse_coordinator_refused_queue_full_total",
              "Turns refused at once because the admission queue was full.", {},
              s.refused_queue_full);
    const char* kDemoted = "Hot copies demoted to warm, by reason.";
    w.Counter("glimpse_coordinator_demoted_total", kDemoted, {{"reason", "expired"}},
              s.demoted_expired);
    w.Counter("glimpse_coordinator_demoted_total", kDemoted, {{"reason", "pressure"}},
              s.demoted_pressure);
    w.Counter("glimpse_coordinator_demoted_total", kDemoted, {{"reason", "dead_node"}},
              s.demoted_dead_node);
    w.Gauge("glimpse_coordinator_queue_delay_seconds",
            "Q: mean queueing delay of reloads (admission + reported prefill wait).", {},
            absl::ToDoubleSeconds(s.queue_delay));
    w.Gauge("glimpse_coordinator_eta", "Continuum eta.", {}, s.eta);
    w.Gauge("glimpse_coordinator_pin_cost", "The estimator's weight c on tau.", {}, s.pin_cost);
  });
}

// store.etcd_endpoints set: etcd; else RocksDB in store.path.
absl::StatusOr<std::unique_ptr<StateStore>> OpenStore(const Config& config) {
  const std::vector<std::string>& endpoints = config.GetStringList("store.etcd_endpoints");
  const std::string path = config.GetString("store.path");
  if (!endpoints.empty()) {  // OptionsFromConfig made sure that store.path is not set too
    EtcdStateStoreOptions o;
    o.etcd.endpoints = endpoints;
    o.etcd.timeout = config.GetDuration("store.etcd_timeout");
    o.prefix = config.GetString("store.etcd_prefix");
    ASSIGN_OR_RETURN(std::unique_ptr<EtcdStateStore> store, EtcdStateStore::Create(o));
    return store;
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<RocksStateStore> store,
      RocksStateStore::Open({path, config.GetBool("store.sync"),
                             static_cast<uint64_t>(config.GetBytes("store.min_free_bytes"))}));
  return store;
}

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& config,
                                                      metrics::MetricsRegistry& registry) {
  absl::StatusOr<CoordinatorOptions> options = OptionsFromConfig(config);
  if (!options.ok()) return options.status();
  auto health = std::make_shared<HealthLatch>();
  options->on_store_failure = [health](const absl::Status&) { health->Fail(); };
  ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, OpenStore(config));
  // A disk already too full to take writes refuses the start, as a cache node's does.
  RETURN_IF_ERROR(store->CanWrite());
  auto service = CoordinatorService::Create(*options, Clock::Real(), store.get());
  if (!service.ok()) return service.status();
  RegisterMetrics(service->get(), registry);
  return std::make_unique<RunningCoordinator>(std::move(store), *std::move(service),
                                              config.GetDuration("tick_interval"),
                                              std::move(health));
}

}  // namespace
}  // namespace glimpse::coordinator

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-coordinator";
  spec.summary =
      "The Glimpse coordinator: membership of prefill/decode workers and cache nodes, KV budgets "
      "per decode worker and tenant with admission control, Continuum-style TTL leases on hot "
      "session KV, KV-aware routing; its state is kept in RocksDB (store.path) across restarts.";
  spec.keys = glimpse::coordinator::CoordinatorConfigKeys();
  spec.start = glimpse::coordinator::Start;
  return glimpse::RunServiceMain(spec, argc, argv);
}

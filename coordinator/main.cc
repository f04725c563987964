// glimpse-coordinator: flags and wiring only (docs/coordinator.md).
#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_config.h"
#include "coordinator/coordinator_grpc.h"
#include "coordinator/leadership.h"
#include "coordinator/rocks_state_store.h"
#include "core/common/clock.h"
#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::coordinator {
namespace {

class RunningCoordinator : public RunningService {
 public:
  RunningCoordinator(std::unique_ptr<Leadership> leadership, std::string advertise_host,
                     absl::Duration tick, std::shared_ptr<HealthLatch> health)
      : leadership_(std::move(leadership)),
        advertise_host_(std::move(advertise_host)),
        grpc_([this] { return leadership_->Current(); }),
        health_(std::move(health)) {
    ticker_ = std::thread([this, tick] {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        cv_.WaitWithTimeout(&mu_, tick);
        if (stop_) break;
        if (auto service = leadership_->Current(); service.ok()) (*service)->Tick();
      }
    });
  }
  ~RunningCoordinator() override { Stop(); }

  std::vector<grpc::Service*> grpc_services() override { return {&grpc_}; }
  // A RocksDB write that failed makes the coordinator NOT_SERVING (it refuses every change);
  // an elected one resigns instead (leadership.h).
  void SetHealthReporter(std::function<void(bool)> report) override {
    health_->Attach(std::move(report));
  }
  // An elected coordinator campaigns once its address is known.
  void OnServing(int grpc_port, int /*metrics_port*/) override {
    if (advertise_host_.empty()) return;
    // An IPv6 host goes in brackets, as in any host:port.
    const bool v6 = advertise_host_.find(':') != std::string::npos;
    const std::string address = v6 ? absl::StrCat("[", advertise_host_, "]:", grpc_port)
                                   : absl::StrCat(advertise_host_, ":", grpc_port);
    if (absl::Status st = leadership_->Campaign(address); !st.ok()) {
      log::Error("cannot campaign; this coordinator will not lead", {{"error", st.ToString()}});
      health_->Fail();
    }
  }
  // An elected leader resigns before draining, so the other coordinator leads at once.
  void OnShutdown() override {
    if (!advertise_host_.empty()) leadership_->Stop();
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
    leadership_->Stop();
  }

 private:
  const std::unique_ptr<Leadership> leadership_;
  const std::string advertise_host_;  // empty: the sole coordinator, no election
  CoordinatorGrpc grpc_;
  const std::shared_ptr<HealthLatch> health_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stop_ is set
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ticker_;
};

void RegisterMetrics(const Leadership* leadership, metrics::MetricsRegistry& registry) {
  registry.AddCollector([leadership](metrics::SampleWriter& w) {
    absl::StatusOr<std::shared_ptr<CoordinatorService>> service = leadership->Current();
    w.Gauge("glimpse_coordinator_leader",
            "1 while this coordinator leads (always, without etcd), else 0.", {},
            service.ok() ? 1 : 0);
    w.Counter("glimpse_coordinator_terms_total", "Terms this coordinator won as leader.", {},
              leadership->terms());
    if (!service.ok()) return;  // a follower holds no state of its own
    CoordinatorStats s = (*service)->Stats();
    w.Gauge("glimpse_coordinator_nodes", "Nodes by liveness.", {{"state", "alive"}}, s.nodes_alive);
    w.Gauge("glimpse_coordinator_nodes", "Nodes by liveness.", {{"state", "dead"}}, s.nodes_dead);
    w.Gauge("glimpse_coordinator_workers_announced",
            "Workers announced on etcd (membership.etcd_prefix), as last watched.", {},
            s.workers_announced);
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

// store.etcd_endpoints set: elected among the coordinators on that etcd; else the sole one,
// on RocksDB in store.path. `health` fails on a RocksDB write error.
absl::StatusOr<std::unique_ptr<Leadership>> Lead(const Config& config, CoordinatorOptions options,
                                                 std::shared_ptr<HealthLatch> health) {
  const std::vector<std::string>& endpoints = config.GetStringList("store.etcd_endpoints");
  if (!endpoints.empty()) {  // OptionsFromConfig made sure that store.path is not set too
    Leadership::ElectedOptions o;
    o.coordinator = std::move(options);
    o.store.etcd.endpoints = endpoints;
    o.store.etcd.timeout = config.GetDuration("store.etcd_timeout");
    o.store.etcd.tls.ca_file = config.GetString("store.etcd_ca");
    o.store.etcd.tls.cert_file = config.GetString("store.etcd_cert");
    o.store.etcd.tls.key_file = config.GetString("store.etcd_key");
    o.store.prefix = config.GetString("store.etcd_prefix");
    o.ttl = config.GetDuration("election.ttl");
    o.poll = config.GetDuration("election.poll");
    o.workers_prefix = config.GetString("membership.etcd_prefix");
    return Leadership::Elected(std::move(o), Clock::Real());
  }
  options.on_store_failure = [health](const absl::Status&) { health->Fail(); };
  ASSIGN_OR_RETURN(
      std::unique_ptr<RocksStateStore> store,
      RocksStateStore::Open({config.GetString("store.path"), config.GetBool("store.sync"),
                             static_cast<uint64_t>(config.GetBytes("store.min_free_bytes"))}));
  // A disk already too full to take writes refuses the start, as a cache node's does.
  RETURN_IF_ERROR(store->CanWrite());
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorService> service,
                   CoordinatorService::Create(options, Clock::Real(), store.get()));
  return Leadership::Sole(std::move(store), std::move(service));
}

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& config,
                                                      metrics::MetricsRegistry& registry) {
  ASSIGN_OR_RETURN(CoordinatorOptions options, OptionsFromConfig(config));
  auto health = std::make_shared<HealthLatch>();
  ASSIGN_OR_RETURN(std::unique_ptr<Leadership> leadership,
                   Lead(config, std::move(options), health));
  RegisterMetrics(leadership.get(), registry);
  const bool elected = !config.GetStringList("store.etcd_endpoints").empty();
  return std::make_unique<RunningCoordinator>(
      std::move(leadership), elected ? config.GetString("advertise_host") : "",
      config.GetDuration("tick_interval"), std::move(health));
}

}  // namespace
}  // namespace glimpse::coordinator

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-coordinator";
  spec.summary =
      "The Glimpse coordinator: membership of prefill/decode workers and cache nodes, KV budgets "
      "per decode worker and tenant with admission control, Continuum-style TTL leases on hot "
      "session KV, KV-aware routing; its state is kept in RocksDB (store.path) across restarts, or "
      "in etcd (store.etcd_endpoints), where several coordinators elect one leader.";
  spec.keys = glimpse::coordinator::CoordinatorConfigKeys();
  spec.start = glimpse::coordinator::Start;
  return glimpse::RunServiceMain(spec, argc, argv);
}

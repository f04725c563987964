// RunServiceMain: the shape every service's main.cc shares, so main.cc is flags and wiring only.
//
//   1. Parses configuration (config.h) from the service's keys plus the common ones below; --help
//      prints the help and exits 0; a bad configuration prints the error and exits 2.
//   2. Starts the service through `start`, which builds its logic and returns the gRPC services to
//      serve (and may register metrics in the given registry).
//   3. Serves them with GrpcServer on `listen`, serves /metrics and /healthz on `metrics_listen`,
//      starts the service's HTTP API if it has one (RunningService::StartHttpApi), logs one
//      "serving" line with the bound ports (structured log fields grpc_port, metrics_port and,
//      with an HTTP API, api_port: tests read them), then waits for SIGINT/SIGTERM.
//   4. On a signal: the service's OnShutdown(), health NOT_SERVING, gRPC shutdown with
//      `shutdown_grace`, then the service's Stop(), exit 0. A start failure logs the error and
//      exits 1.
//
// Common keys: listen (string, "127.0.0.1:0"), metrics_listen (string, "127.0.0.1:0"),
// tls.cert, tls.key, tls.client_ca (strings, ""), log_level (string, "info"),
// shutdown_grace (duration, "5s").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/config.h"
#include "core/common/grpc/server.h"
#include "core/common/metrics.h"
#include "grpcpp/channel.h"
#include "grpcpp/impl/service_type.h"

namespace glimpse {

class RunningService {
 public:
  virtual ~RunningService() = default;
  virtual std::vector<grpc::Service*> grpc_services() = 0;
  // A service's data-plane HTTP API beside its gRPC one (the frontend's OpenAI API), started
  // once the gRPC server listens, with an in-process channel to it: returns the bound port, 0
  // when the service has none. An error fails the start (exit 1).
  virtual absl::StatusOr<int> StartHttpApi(std::shared_ptr<grpc::Channel> /*self*/) { return 0; }
  // Called once both servers listen, with their bound ports (after the "serving" log line, before
  // waiting for a signal): e.g. register with the coordinator, which needs the gRPC port.
  virtual void OnServing(int /*grpc_port*/, int /*metrics_port*/) {}
  // Called when a signal arrives, before the gRPC server drains its calls: hand over what another
  // process can take over at once (an elected coordinator resigns).
  virtual void OnShutdown() {}
  // Called after the gRPC server stopped; flush and close (e.g. RocksDB).
  virtual void Stop() {}
  // Called once both servers listen, before OnServing: `report(false)` marks the gRPC health
  // (every service) and /healthz NOT_SERVING, e.g. after a failure the service cannot serve past.
  // Not to be called after Stop returns.
  virtual void SetHealthReporter(std::function<void(bool serving)> /*report*/) {}
};

// A failure a service meets before or after its health reporter is attached, reported once it
// is (RunningService::SetHealthReporter). Thread-safe.
class HealthLatch {
 public:
  void Fail();
  void Attach(std::function<void(bool serving)> report);
  void Detach();  // nothing is reported afterwards

 private:
  absl::Mutex mu_;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(bool serving)> report_ ABSL_GUARDED_BY(mu_);
};

struct ServiceSpec {
  std::string program;  // e.g. "glimpse-cache-node"
  std::string summary;  // one paragraph for --help
  std::vector<ConfigKey> keys;
  // The frontend's client API: grpc.reflection defaults to off, and its gRPC port may serve
  // beyond loopback without client certificates (its callers are tenants with bearer tokens).
  // Every other service is internal: beyond loopback it must require client certificates
  // (tls.cert, tls.key, tls.client_ca: mutual TLS, identity.h) unless insecure_listen is set.
  bool public_endpoint = false;
  std::function<absl::StatusOr<std::unique_ptr<RunningService>>(const Config&,
                                                                metrics::MetricsRegistry&)>
      start;
};

// The keys of a service that calls other services (client_tls.ca, client_tls.cert,
// client_tls.key; `peers` names them in the help, e.g. "the coordinator and cache node"), and the
// TlsFiles they configure: plaintext without a CA; InvalidArgument for a certificate without a
// CA or without its key.
std::vector<ConfigKey> ClientTlsKeys(const std::string& peers);
absl::StatusOr<TlsFiles> ClientTlsFromConfig(const Config& config);

// Returns the process exit code (0, 1 or 2 as above); main returns it. Only one may run at a
// time in a process: it owns the SIGINT/SIGTERM handlers while it runs and restores the previous
// ones before returning.
int RunServiceMain(const ServiceSpec& spec, int argc, char** argv);

}  // namespace glimpse

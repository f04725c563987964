#include "core/common/grpc/service_main.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/common/grpc/server.h"
#include "core/common/http_server.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse {
namespace {

// Self-pipe: the signal handler may only do async-signal-safe things, so it writes one byte
// that the main thread is blocked reading.
std::atomic<int> g_signal_pipe_write{-1};

void OnSignal(int) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe_write.load();
  const char c = 's';
  if (fd >= 0) (void)!write(fd, &c, 1);
  errno = saved_errno;
}

// Installs the SIGINT/SIGTERM handlers for its lifetime, restoring the previous ones after.
class SignalWaiter {
 public:
  SignalWaiter() {
    if (pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
    g_signal_pipe_write.store(fds_[1]);
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalWaiter() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    g_signal_pipe_write.store(-1);
    for (const int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  bool ok() const { return fds_[0] >= 0; }
  void Wait() {
    char c;
    while (read(fds_[0], &c, 1) < 0 && errno == EINTR) {
    }
  }

 private:
  int fds_[2];
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace

std::vector<ConfigKey> ClientTlsKeys(const std::string& peers) {
  return {
      {"client_tls.ca", ConfigType::kString, "",
       "PEM CA that signed the certificates of " + peers + "; empty: plaintext to them."},
      {"client_tls.cert", ConfigType::kString, "",
       "PEM client certificate for mutual TLS to " + peers + "."},
      {"client_tls.key", ConfigType::kString, "", "PEM private key of client_tls.cert."},
      {"client_tls.server_name", ConfigType::kString, "",
       "Name the certificates of " + peers +
           " must carry (empty: the host they are reached at); e.g. the DNS name every "
           "certificate of a cluster shares when nodes register pod IPs."},
  };
}

absl::StatusOr<TlsFiles> ClientTlsFromConfig(const Config& config) {
  TlsFiles tls{config.GetString("client_tls.cert"), config.GetString("client_tls.key"),
               config.GetString("client_tls.ca"), config.GetString("client_tls.server_name")};
  if (!tls.cert_file.empty() && tls.ca_file.empty()) {
    return absl::InvalidArgumentError("client_tls.cert is set but client_tls.ca is not");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("client_tls.cert and client_tls.key go together");
  }
  return tls;
}

namespace {

std::vector<ConfigKey> AllKeys(const ServiceSpec& spec) {
  std::vector<ConfigKey> keys = spec.keys;
  const std::vector<ConfigKey> common = {
      {"listen", ConfigType::kString, "127.0.0.1:0", "gRPC address (host:port; port 0 picks one)."},
      {"metrics_listen", ConfigType::kString, "127.0.0.1:0",
       "HTTP address for /metrics and /healthz (host:port; port 0 picks one)."},
      {"tls.cert", ConfigType::kString, "", "PEM server certificate; empty serves plaintext."},
      {"tls.key", ConfigType::kString, "", "PEM private key of tls.cert."},
      {"tls.client_ca", ConfigType::kString, "",
       "PEM CA for client certificates; set, clients must present one (mutual TLS)."},
      {"log_level", ConfigType::kString, "info", "debug, info, warning or error."},
      {"shutdown_grace", ConfigType::kDuration, "5s",
       "How long in-flight calls may finish after a signal."},
      {"grpc.max_threads", ConfigType::kInt, "256",
       "Threads serving gRPC calls; a call that finds none is RESOURCE_EXHAUSTED at once."},
      {"grpc.max_concurrent_streams", ConfigType::kInt, "128",
       "Concurrent calls per client connection (HTTP/2); a client queues beyond it."},
      {"grpc.reflection", ConfigType::kBool, spec.public_endpoint ? "false" : "true",
       "Serve gRPC server reflection (lists every method to whoever connects)."},
  };
  if (!spec.public_endpoint) {
    keys.push_back({"insecure_listen", ConfigType::kBool, "false",
                    "Serve `listen` beyond loopback without mutual TLS (a lab network you trust); "
                    "otherwise such a listen address needs tls.cert, tls.key and tls.client_ca."});
  }
  keys.insert(keys.end(), common.begin(), common.end());
  return keys;
}

absl::Status ApplyLogLevel(const std::string& level) {
  if (level == "debug") {
    log::SetMinLevel(log::Level::kDebug);
  } else if (level == "info") {
    log::SetMinLevel(log::Level::kInfo);
  } else if (level == "warning") {
    log::SetMinLevel(log::Level::kWarning);
  } else if (level == "error") {
    log::SetMinLevel(log::Level::kError);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value for log_level: '", level, "' (debug, info, warning or error)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> StartHttp(const Config& config,
                                                      const metrics::MetricsRegistry& registry,
                                                      const std::atomic<bool>& healthy) {
  ASSIGN_OR_RETURN(const HttpServerOptions options,
                   ParseHttpAddress(config.GetString("metrics_listen"), "metrics_listen"));
  std::map<std::string, HttpServer::Handler> routes;
  routes["/metrics"] = [&registry] {
    return HttpResponse{200, HttpResponse().content_type, registry.Render()};
  };
  routes["/healthz"] = [&healthy] {
    return healthy.load() ? HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}
                          : HttpResponse{503, "text/plain; charset=utf-8", "not serving\n"};
  };
  return HttpServer::Start(options, std::move(routes));
}

bool Loopback(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// An internal service beyond loopback authenticates its callers (mutual TLS) unless told not to.
absl::Status CheckListenSecurity(const ServiceSpec& spec, const Config& config) {
  const std::string listen = config.GetString("listen");
  if (spec.public_endpoint || Loopback(listen) || config.GetBool("insecure_listen")) {
    return absl::OkStatus();
  }
  if (!config.GetString("tls.cert").empty() && !config.GetString("tls.client_ca").empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "listen ", listen, " is beyond loopback: an internal service there needs mutual TLS ",
      "(tls.cert, tls.key and tls.client_ca; `glimpse certs` makes them), or ",
      "--insecure_listen=true on a network you trust"));
}

// Everything between a parsed configuration and the exit code.
int Serve(const ServiceSpec& spec, const Config& config, SignalWaiter& signals) {
  metrics::MetricsRegistry registry;
  std::atomic<bool> healthy{true};
  absl::StatusOr<std::unique_ptr<RunningService>> service = spec.start(config, registry);
  if (!service.ok()) {
    log::Error("start failed", {{"program", spec.program}, {"error", service.status().ToString()}});
    return 1;
  }
  GrpcServerOptions grpc_options;
  grpc_options.address = config.GetString("listen");
  grpc_options.max_threads = static_cast<int>(config.GetInt("grpc.max_threads"));
  grpc_options.max_concurrent_streams =
      static_cast<int>(config.GetInt("grpc.max_concurrent_streams"));
  grpc_options.reflection = config.GetBool("grpc.reflection");
  grpc_options.tls = {config.GetString("tls.cert"), config.GetString("tls.key"),
                      config.GetString("tls.client_ca"), ""};
  absl::StatusOr<std::unique_ptr<GrpcServer>> grpc_server =
      GrpcServer::Start(grpc_options, (*service)->grpc_services());
  absl::StatusOr<std::unique_ptr<HttpServer>> http_server =
      grpc_server.ok() ? StartHttp(config, registry, healthy) : grpc_server.status();
  absl::StatusOr<int> api_port = http_server.ok()
                                     ? (*service)->StartHttpApi((*grpc_server)->InProcessChannel())
                                     : http_server.status();
  if (!api_port.ok()) {
    log::Error("start failed",
               {{"program", spec.program}, {"error", api_port.status().ToString()}});
    if (grpc_server.ok()) grpc_server->reset();  // stop serving before stopping the service
    (*service)->Stop();
    return 1;
  }

  const int grpc_port = (*grpc_server)->port();
  const int metrics_port = (*http_server)->port();
  if (*api_port != 0) {
    log::Info("serving", {{"program", spec.program},
                          {"grpc_port", static_cast<long long>(grpc_port)},
                          {"metrics_port", static_cast<long long>(metrics_port)},
                          {"api_port", static_cast<long long>(*api_port)}});
  } else {
    log::Info("serving", {{"program", spec.program},
                          {"grpc_port", static_cast<long long>(grpc_port)},
                          {"metrics_port", static_cast<long long>(metrics_port)}});
  }
  (*service)->SetHealthReporter([&healthy, server = grpc_server->get()](bool serving) {
    healthy.store(serving);
    server->SetServing(serving);
  });
  (*service)->OnServing(grpc_port, metrics_port);
  signals.Wait();

  const absl::Duration grace = config.GetDuration("shutdown_grace");
  log::Info("shutting down",
            {{"program", spec.program}, {"grace_seconds", absl::ToDoubleSeconds(grace)}});
  (*service)->OnShutdown();
  healthy.store(false);
  (*grpc_server)->Shutdown(absl::Now() + grace);
  (*service)->Stop();
  http_server->reset();  // last: /metrics stays readable while the service drains
  log::Info("stopped", {{"program", spec.program}});
  return 0;
}

}  // namespace

void HealthLatch::Fail() {
  absl::MutexLock lock(&mu_);
  failed_ = true;
  if (report_) report_(false);
}

void HealthLatch::Attach(std::function<void(bool serving)> report) {
  absl::MutexLock lock(&mu_);
  report_ = std::move(report);
  if (failed_ && report_) report_(false);
}

void HealthLatch::Detach() {
  absl::MutexLock lock(&mu_);
  report_ = nullptr;
}

int RunServiceMain(const ServiceSpec& spec, int argc, char** argv) {
  absl::StatusOr<Config> config =
      Config::Parse(spec.program, spec.summary, AllKeys(spec), argc, argv);
  if (config.ok() && config->help_requested()) {
    std::fputs(config->help_text().c_str(), stdout);
    return 0;
  }
  absl::Status status =
      config.ok() ? ApplyLogLevel(config->GetString("log_level")) : config.status();
  if (status.ok()) status = CheckListenSecurity(spec, *config);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.program.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  // Handlers go in before anything starts, so a signal during start-up is not lost: it ends
  // the wait as soon as serving begins.
  SignalWaiter signals;
  if (!signals.ok()) {
    log::Error("start failed", {{"program", spec.program}, {"error", "cannot create a pipe"}});
    return 1;
  }
  return Serve(spec, *config, signals);
}

}  // namespace glimpse

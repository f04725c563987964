#include "core/common/grpc/server.h"

#include <climits>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/impl/server_initializer.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace glimpse {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read TLS ", what, " file ", path));
  }
  return text.str();
}

// grpc::Service does not expose its name, but the server learns every registered service's name;
// this plugin copies that list out once the server is built, so health can report each one.
class ServiceNamesPlugin final : public grpc::ServerBuilderPlugin {
 public:
  explicit ServiceNamesPlugin(std::vector<std::string>* names) : names_(names) {}
  std::string name() override { return "glimpse_service_names"; }
  void InitServer(grpc::ServerInitializer*) override {}
  void Finish(grpc::ServerInitializer* si) override { *names_ = *si->GetServiceList(); }
  void ChangeArguments(const std::string&, void*) override {}

 private:
  std::vector<std::string>* names_;
};

class ServiceNamesOption final : public grpc::ServerBuilderOption {
 public:
  explicit ServiceNamesOption(std::vector<std::string>* names) : names_(names) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ServiceNamesPlugin>(names_));
  }

 private:
  std::vector<std::string>* names_;
};

// Leaves server reflection out of one server (the plugin that turns it on is process-wide).
class NoReflectionOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const auto& p) { return p->name() == "proto_server_reflection"; });
  }
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls) {
  if (tls.cert_file.empty()) {
    if (!tls.key_file.empty() || !tls.ca_file.empty()) {
      return absl::InvalidArgumentError("TLS key or client CA set without a certificate file");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  ASSIGN_OR_RETURN(const std::string cert, ReadPem(tls.cert_file, "certificate"));
  ASSIGN_OR_RETURN(const std::string key, ReadPem(tls.key_file, "key"));
  options.pem_key_cert_pairs.push_back({key, cert});
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "client CA"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const GrpcServerOptions& options, const std::vector<grpc::Service*>& services) {
  if (options.max_threads < 4 || options.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gRPC max_threads must be at least 4 and max_concurrent_streams at least 1; "
                     "got ",
                     options.max_threads, " and ", options.max_concurrent_streams));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentials(options.tls));
  // Both are process-wide switches read when a server is built; setting them again is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.address, credentials, &port);
  // gRPC sets SO_REUSEPORT by default, which would let a second server share a busy port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(options.max_receive_message_bytes, INT_MAX)));
  // Accept the keepalive pings ClientChannel sends (gRPC's default would answer a ping more often
  // than every 5 minutes without data with GOAWAY "too_many_pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveInterval) / 2));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  grpc::ResourceQuota quota("glimpse-server");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::vector<std::string> names;
  builder.SetOption(std::make_unique<ServiceNamesOption>(&names));
  if (!options.reflection) builder.SetOption(std::make_unique<NoReflectionOption>());

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", options.address, " (address in use or invalid?)"));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus("", true);
  for (const std::string& name : names) health->SetServingStatus(name, true);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(server), port, std::move(names)));
}

GrpcServer::GrpcServer(std::unique_ptr<grpc::Server> server, int port,
                       std::vector<std::string> names)
    : server_(std::move(server)), port_(port), names_(std::move(names)) {}

std::shared_ptr<grpc::Channel> GrpcServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void GrpcServer::SetServing(bool serving) {
  if (shut_down_) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", serving);
  for (const std::string& name : names_) health->SetServingStatus(name, serving);
}

GrpcServer::~GrpcServer() { Shutdown(absl::Now()); }

void GrpcServer::Shutdown(absl::Time deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  // Health first, so Watch-ing load balancers see NOT_SERVING while calls drain.
  server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
}

namespace {

// A peer that vanishes without closing its connection (a cut link, a frozen host) ends the calls
// in flight within about two keepalive intervals, instead of at the caller's deadline.
grpc::ChannelArguments ClientArguments(absl::Duration keepalive) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kInitialReconnectBackoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kMaxReconnectBackoff)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(keepalive)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveInterval)));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a long prefill sends no data
  return args;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> ClientChannel(const std::string& address,
                                                             const TlsFiles& tls,
                                                             absl::Duration keepalive) {
  if (tls.ca_file.empty()) {
    if (!tls.cert_file.empty()) {
      return absl::InvalidArgumentError("client certificate set without the server's CA file");
    }
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                     ClientArguments(keepalive));
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  if (!tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPem(tls.cert_file, "certificate"));
    ASSIGN_OR_RETURN(options.pem_private_key, ReadPem(tls.key_file, "key"));
  }
  grpc::ChannelArguments args = ClientArguments(keepalive);
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
}

}  // namespace glimpse

// glimpse-frontend: flags and wiring only (docs/frontend.md).
#include <memory>

#include "absl/strings/str_join.h"
#include "core/common/grpc/service_main.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "frontend/frontend_config.h"
#include "frontend/frontend_grpc.h"
#include "frontend/frontend_service.h"
#include "frontend/openai_server.h"

namespace glimpse::frontend {
namespace {

class RunningFrontend : public RunningService {
 public:
  RunningFrontend(std::unique_ptr<model::Model> model, std::unique_ptr<FrontendMetrics> metrics,
                  std::unique_ptr<FrontendService> service,
                  std::optional<OpenAiServerOptions> openai, metrics::MetricsRegistry& registry)
      : model_(std::move(model)),
        metrics_(std::move(metrics)),
        service_(std::move(service)),
        grpc_(service_.get(), metrics_.get()),
        openai_options_(std::move(openai)),
        registry_(registry) {}
  std::vector<grpc::Service*> grpc_services() override { return {&grpc_}; }
  absl::StatusOr<int> StartHttpApi(std::shared_ptr<grpc::Channel> self) override {
    if (!openai_options_) return 0;
    ASSIGN_OR_RETURN(openai_, OpenAiServer::Start(*openai_options_, std::move(self), registry_));
    log::Info("OpenAI API ready", {{"port", static_cast<long long>(openai_->port())},
                                   {"model_name", openai_options_->model_id},
                                   {"tls", openai_options_->tls.cert_file.empty() ? "off" : "on"}});
    return openai_->port();
  }
  void Stop() override { openai_.reset(); }

 private:
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<FrontendMetrics> metrics_;
  std::unique_ptr<FrontendService> service_;
  FrontendGrpc grpc_;
  const std::optional<OpenAiServerOptions> openai_options_;
  metrics::MetricsRegistry& registry_;
  std::unique_ptr<OpenAiServer> openai_;
};

absl::StatusOr<std::unique_ptr<RunningService>> Start(const Config& config,
                                                      metrics::MetricsRegistry& registry) {
  ASSIGN_OR_RETURN(FrontendOptions options, OptionsFromConfig(config));
  ASSIGN_OR_RETURN(Tenancy tenancy, LoadTenancy(config));
  std::string path = config.GetString("model");
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(std::optional<OpenAiServerOptions> openai,
                   OpenAiOptionsFromConfig(config, path));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  auto metrics = std::make_unique<FrontendMetrics>(registry);
  ASSIGN_OR_RETURN(std::unique_ptr<FrontendService> service,
                   FrontendService::Create(options, model.get(), std::move(tenancy.auth),
                                           std::move(tenancy.salt_secret), metrics.get()));
  log::Info("frontend ready", {{"model", path},
                               {"fingerprint", model->fingerprint()},
                               {"coordinator", absl::StrJoin(options.coordinator_addresses, ",")},
                               {"default_policy", PolicyString(service->limits().default_policy)}});
  return std::make_unique<RunningFrontend>(std::move(model), std::move(metrics), std::move(service),
                                           std::move(openai), registry);
}

}  // namespace
}  // namespace glimpse::frontend

int main(int argc, char** argv) {
  glimpse::ServiceSpec spec;
  spec.program = "glimpse-frontend";
  spec.summary =
      "The Glimpse frontend API (glimpse.v1.Frontend): Generate streams one turn of a session "
      "(tokens or chat messages), routed by the coordinator to a decode worker; EndSession, "
      "GetSession, ToolCallEnded; and the OpenAI HTTP API (openai.*). Per-tenant bearer tokens "
      "(auth.tokens_file), tenant-salted "
      "state keys, TLS to callers (tls.*) and to the coordinator and workers (client_tls.*).";
  spec.keys = glimpse::frontend::FrontendConfigKeys();
  spec.public_endpoint = true;
  spec.start = glimpse::frontend::Start;
  return glimpse::RunServiceMain(spec, argc, argv);
}

#include "core/common/grpc/service_main.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/grpc/server.h"
#include "core/common/grpc/testdata/test_services.h"
#include "core/common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse {
namespace {

using grpc::health::v1::HealthCheckResponse;

class TestService final : public RunningService {
 public:
  TestService(std::atomic<bool>* stopped, std::promise<std::pair<int, int>>* ports)
      : stopped_(stopped), ports_(ports) {}
  std::vector<grpc::Service*> grpc_services() override { return {&echo_}; }
  void OnServing(int grpc_port, int metrics_port) override {
    ports_->set_value({grpc_port, metrics_port});
  }
  void Stop() override { stopped_->store(true); }

 private:
  grpctest::EchoService echo_;
  std::atomic<bool>* stopped_;
  std::promise<std::pair<int, int>>* ports_;
};

struct Harness {
  std::atomic<bool> stopped{false};
  std::promise<std::pair<int, int>> ports;
  absl::Status start_status = absl::OkStatus();

  ServiceSpec Spec() {
    ServiceSpec spec;
    spec.program = "glimpse-test";
    spec.summary = "A service for tests.";
    spec.keys = {{"greeting", ConfigType::kString, "hello", "What to say."}};
    spec.start = [this](const Config& config, metrics::MetricsRegistry& registry)
        -> absl::StatusOr<std::unique_ptr<RunningService>> {
      if (!start_status.ok()) return start_status;
      registry
          .AddCounter("test_started_total", "Starts.", {{"greeting", config.GetString("greeting")}})
          .Increment();
      return std::make_unique<TestService>(&stopped, &ports);
    };
    return spec;
  }
};

int RunMain(const ServiceSpec& spec, std::vector<std::string> args) {
  args.insert(args.begin(), "glimpse-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RunServiceMain(spec, static_cast<int>(argv.size()), argv.data());
}

TEST(ServiceMainTest, ServesUntilSigtermThenStops) {
  Harness harness;
  const ServiceSpec spec = harness.Spec();
  ::testing::internal::CaptureStderr();
  std::future<int> exit_code =
      std::async(std::launch::async, [&] { return RunMain(spec, {"--greeting=hej"}); });
  std::future<std::pair<int, int>> ports = harness.ports.get_future();
  ASSERT_EQ(ports.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const auto [grpc_port, metrics_port] = ports.get();

  auto channel = ClientChannel(absl::StrCat("127.0.0.1:", grpc_port));
  ASSERT_TRUE(channel.ok());
  EXPECT_EQ(grpctest::CallEcho(*channel, "ping").value(), "ping");
  EXPECT_EQ(grpctest::CheckHealth(*channel, "").value(), HealthCheckResponse::SERVING);
  EXPECT_EQ(HttpGet("127.0.0.1", metrics_port, "/healthz").value(), "ok\n");
  const std::string metrics = HttpGet("127.0.0.1", metrics_port, "/metrics").value();
  EXPECT_TRUE(absl::StrContains(metrics, "test_started_total{greeting=\"hej\"} 1\n")) << metrics;
  EXPECT_FALSE(harness.stopped.load());

  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(exit_code.get(), 0);
  EXPECT_TRUE(harness.stopped.load());

  // The "serving" line carries both ports as numbers.
  std::istringstream lines(::testing::internal::GetCapturedStderr());
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || json.value("msg", "") != "serving") continue;
    found = true;
    EXPECT_EQ(json["grpc_port"], grpc_port);
    EXPECT_EQ(json["metrics_port"], metrics_port);
  }
  EXPECT_TRUE(found);
}

TEST(ServiceMainTest, HelpListsServiceAndCommonKeysAndExitsZero) {
  Harness harness;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunMain(harness.Spec(), {"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* key : {"--greeting (string", "--listen (string", "--metrics_listen (string",
                          "--tls.cert", "--tls.key", "--tls.client_ca", "--log_level",
                          "--shutdown_grace (duration, default \"5s\")"}) {
    EXPECT_TRUE(absl::StrContains(help, key)) << key << " missing from:\n" << help;
  }
}

TEST(ServiceMainTest, BadConfigurationExitsTwo) {
  Harness harness;
  EXPECT_EQ(RunMain(harness.Spec(), {"--no_such_key=1"}), 2);
  EXPECT_EQ(RunMain(harness.Spec(), {"--log_level=loud"}), 2);
  EXPECT_EQ(RunMain(harness.Spec(), {"--metrics_listen=nocolon", "--shutdown_grace=soon"}), 2);
}

// An internal service beyond loopback without mutual TLS does not start (exit 2, naming the way
// out); loopback, insecure_listen, mutual TLS or a public endpoint do.
TEST(ServiceMainTest, AnInternalServiceBeyondLoopbackNeedsMutualTls) {
  Harness harness;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunMain(harness.Spec(), {"--listen=0.0.0.0:0"}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::StrContains(err, "needs mutual TLS")) << err;
  EXPECT_TRUE(absl::StrContains(err, "--insecure_listen=true")) << err;
  EXPECT_EQ(RunMain(harness.Spec(), {"--listen=0.0.0.0:0", "--tls.cert=c.pem", "--tls.key=k"}), 2);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunMain(harness.Spec(), {"--help"}), 0);
  EXPECT_TRUE(absl::StrContains(::testing::internal::GetCapturedStdout(), "--insecure_listen"));

  // The way out, or a public endpoint, gets past the check: here to the start failure.
  harness.start_status = absl::FailedPreconditionError("stop here");
  EXPECT_EQ(RunMain(harness.Spec(), {"--listen=0.0.0.0:0", "--insecure_listen=true"}), 1);
  EXPECT_EQ(RunMain(harness.Spec(), {"--listen=[::1]:0"}), 1);
  ServiceSpec public_spec = harness.Spec();
  public_spec.public_endpoint = true;
  EXPECT_EQ(RunMain(public_spec, {"--listen=0.0.0.0:0"}), 1);
}

TEST(ServiceMainTest, StartFailureExitsOne) {
  Harness harness;
  harness.start_status = absl::FailedPreconditionError("disk missing");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunMain(harness.Spec(), {}), 1);
  EXPECT_TRUE(absl::StrContains(::testing::internal::GetCapturedStderr(), "disk missing"));
}

TEST(ServiceMainTest, UnusableAddressExitsOneAndStopsTheService) {
  Harness harness;
  EXPECT_EQ(RunMain(harness.Spec(), {"--metrics_listen=nocolon"}), 1);
  EXPECT_TRUE(harness.stopped.load());
}

}  // namespace
}  // namespace glimpse

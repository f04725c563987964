#include "core/common/grpc/server.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/grpc/testdata/test_certs.h"
#include "core/common/grpc/testdata/test_services.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

using grpc::health::v1::HealthCheckResponse;
using grpctest::CallEcho;
using grpctest::CheckHealth;

std::string Local(int port) { return absl::StrCat("127.0.0.1:", port); }

TEST(GrpcServerTest, ServesServicesAndHealth) {
  grpctest::EchoService echo;
  auto server = GrpcServer::Start({}, {&echo});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  auto channel = ClientChannel(Local((*server)->port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(CallEcho(*channel, "hi").value(), "hi");
  EXPECT_EQ(CheckHealth(*channel, "").value(), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(*channel, grpctest::kEchoServiceName).value(),
            HealthCheckResponse::SERVING);
  // Reflection is registered too (and so reported by health).
  EXPECT_EQ(CheckHealth(*channel, "grpc.reflection.v1alpha.ServerReflection").value(),
            HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(*channel, "no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

// A server without reflection (a public endpoint) does not list its methods, beside one with it in
// the same process (the plugin that enables reflection is process-wide).
TEST(GrpcServerTest, ReflectionCanBeLeftOutOfOneServer) {
  grpctest::EchoService with_echo, without_echo;
  auto with = GrpcServer::Start({}, {&with_echo});
  ASSERT_TRUE(with.ok()) << with.status();
  auto without = GrpcServer::Start({.reflection = false}, {&without_echo});
  ASSERT_TRUE(without.ok()) << without.status();
  auto channel = ClientChannel(Local((*without)->port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(CallEcho(*channel, "hi").value(), "hi");
  EXPECT_EQ(CheckHealth(*channel, "grpc.reflection.v1alpha.ServerReflection").status().code(),
            absl::StatusCode::kNotFound);
  auto other = ClientChannel(Local((*with)->port()));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(CheckHealth(*other, "grpc.reflection.v1alpha.ServerReflection").value(),
            HealthCheckResponse::SERVING);
}

// SetServing(false) (a service that cannot serve past a failure) marks every service NOT_SERVING
// while calls still reach it; SetServing(true) undoes it.
TEST(GrpcServerTest, SetServingChangesTheHealthOfEveryService) {
  grpctest::EchoService echo;
  auto server = GrpcServer::Start({}, {&echo});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = ClientChannel(Local((*server)->port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  (*server)->SetServing(false);
  EXPECT_EQ(CheckHealth(*channel, "").value(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(*channel, grpctest::kEchoServiceName).value(),
            HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CallEcho(*channel, "still").value(), "still");
  (*server)->SetServing(true);
  EXPECT_EQ(CheckHealth(*channel, "").value(), HealthCheckResponse::SERVING);
}

// Echo that holds its thread until released.
class HeldEchoService final : public grpctest::Echo::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*, const grpctest::EchoRequest* request,
                    grpctest::EchoResponse* response) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++held_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    response->set_text(request->text());
    return grpc::Status::OK;
  }
  void AwaitHeld(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_ >= n; });
  }
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
};

// With every serving thread held by slow calls, a new call is RESOURCE_EXHAUSTED at once rather
// than queued without bound; once they finish, calls are served again.
TEST(GrpcServerTest, CallsBeyondTheThreadCapAreRefusedNotQueued) {
  HeldEchoService held;
  auto server = GrpcServer::Start({.max_threads = 4}, {&held});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = ClientChannel(Local((*server)->port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::vector<std::thread> callers;
  std::atomic<int> refused{0}, served{0}, done{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      const absl::StatusOr<std::string> r = CallEcho(*channel, "slow");
      if (r.ok()) ++served;
      if (r.status().code() == absl::StatusCode::kResourceExhausted) ++refused;
      ++done;
    });
  }
  held.AwaitHeld(1);
  // Until a call is refused, or every call that is not held has ended (queued ones time out).
  while (refused.load() == 0 && done.load() < 8 - held.held()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  held.Release();
  for (std::thread& t : callers) t.join();
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(served.load() + refused.load(), 8);
  // Serving again once the released calls' threads are back in the pool (on a busy machine that
  // can take a moment after their replies arrive: wait for it, within a bound).
  absl::StatusOr<std::string> again = CallEcho(*channel, "again");
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       again.status().code() == absl::StatusCode::kResourceExhausted && absl::Now() < end;
       again = CallEcho(*channel, "again")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, "again");
  EXPECT_EQ(GrpcServer::Start({.max_threads = 1}, {&held}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GrpcServerTest, ShutdownIsIdempotentAndStopsServing) {
  grpctest::EchoService echo;
  auto server = GrpcServer::Start({}, {&echo});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = ClientChannel(Local((*server)->port()));
  ASSERT_TRUE(channel.ok());
  ASSERT_TRUE(CallEcho(*channel, "x").ok());
  (*server)->Shutdown(absl::Now() + absl::Seconds(1));
  (*server)->Shutdown(absl::Now());
  EXPECT_FALSE(CallEcho(*channel, "x").ok());
}

TEST(GrpcServerTest, PortInUseIsAnError) {
  auto first = GrpcServer::Start({}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  GrpcServerOptions options;
  options.address = Local((*first)->port());
  const auto second = GrpcServer::Start(options, {});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), options.address)) << second.status();
}

TEST(GrpcServerTest, UnreadableCertificateIsAnError) {
  GrpcServerOptions options;
  options.tls = {"/nonexistent/server.pem", "/nonexistent/server.key", "", ""};
  const auto server = GrpcServer::Start(options, {});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "/nonexistent/server.pem"))
      << server.status();
  const auto channel = ClientChannel("127.0.0.1:1", {"", "", "/nonexistent/ca.pem", ""});
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(), "/nonexistent/ca.pem"));
}

// Certificates made at test time with the openssl CLI: a CA, a server certificate for
// 127.0.0.1/localhost and a client certificate, all signed by the CA.
class GrpcTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = glimpse::testing::MakeTestCertificates("glimpse_tls");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::system(absl::StrCat("rm -rf ", dir_).c_str());
  }
  static std::string File(const std::string& name) { return dir_ + "/" + name; }
  static TlsFiles ServerTls(bool mutual) {
    return {File("server.pem"), File("server.key"), mutual ? File("ca.pem") : "", ""};
  }

  static std::string dir_;
};
std::string GrpcTlsTest::dir_;

TEST_F(GrpcTlsTest, TlsClientConnectsAndPlaintextClientFails) {
  grpctest::EchoService echo;
  GrpcServerOptions options;
  options.tls = ServerTls(/*mutual=*/false);
  auto server = GrpcServer::Start(options, {&echo});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Local((*server)->port());

  auto tls = ClientChannel(address, {"", "", File("ca.pem"), ""});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(CallEcho(*tls, "secret").value(), "secret");
  EXPECT_EQ(CheckHealth(*tls, "").value(), HealthCheckResponse::SERVING);

  auto plain = ClientChannel(address);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(CallEcho(*plain, "x").ok());
}

TEST_F(GrpcTlsTest, MutualTlsRefusesClientWithoutCertificate) {
  grpctest::EchoService echo;
  GrpcServerOptions options;
  options.tls = ServerTls(/*mutual=*/true);
  auto server = GrpcServer::Start(options, {&echo});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Local((*server)->port());

  auto with_cert =
      ClientChannel(address, {File("client.pem"), File("client.key"), File("ca.pem"), ""});
  ASSERT_TRUE(with_cert.ok()) << with_cert.status();
  EXPECT_EQ(CallEcho(*with_cert, "m").value(), "m");

  auto without_cert = ClientChannel(address, {"", "", File("ca.pem"), ""});
  ASSERT_TRUE(without_cert.ok());
  EXPECT_FALSE(CallEcho(*without_cert, "m").ok());
}

}  // namespace
}  // namespace glimpse

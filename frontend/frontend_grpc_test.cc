// The frontend through gRPC against a real in-process coordinator (CoordinatorService, its gRPC
// adapter, an in-memory store, FakeClock time) and the default model's tokenizer. A decode worker
// "registered" at an address nobody serves stands in for one that fails mid-turn; the streaming
// path with a real decode worker is covered by the end-to-end tests in tests/.
#include "frontend/frontend_grpc.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_grpc.h"
#include "core/common/clock.h"
#include "core/common/grpc/certificates.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/server.h"
#include "core/common/grpc/testdata/test_certs.h"
#include "core/model/model_store.h"
#include "core/model/test_files.h"
#include "core/model/test_model.h"
#include "frontend/openai_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend {
namespace {

using ::testing::HasSubstr;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

// A coordinator served in-process, optionally with TLS.
struct Coordinator {
  // `tls`: how it serves; `client_tls`: how this test's own stub connects.
  explicit Coordinator(const TlsFiles& tls = {}, const TlsFiles& client_tls = {}) {
    coordinator::CoordinatorOptions o;
    o.kv_bytes_per_token = 100;
    service = coordinator::CoordinatorService::Create(o, &clock, &store).value();
    adapter = std::make_unique<coordinator::CoordinatorGrpc>(service.get());
    GrpcServerOptions options;
    options.tls = tls;
    server = GrpcServer::Start(options, {adapter.get()}).value();
    address = absl::StrCat("127.0.0.1:", server->port());
    stub = v1::Coordinator::NewStub(ClientChannel(address, client_tls).value());
  }
  ~Coordinator() { server->Shutdown(absl::Now()); }

  void RegisterDecode(const std::string& id, const std::string& address) {
    v1::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_role(v1::NODE_ROLE_DECODE);
    req.set_grpc_address(address);
    req.set_capacity_bytes(1'000'000'000);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->RegisterNode(&ctx, req, &resp).ok());
  }
  grpc::Status Session(const std::string& scoped, v1::SessionInfo* info) {
    v1::GetSessionRequest req;
    req.set_session_id(scoped);
    v1::GetSessionResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub->GetSession(&ctx, req, &resp);
    *info = resp.session();
    return st;
  }

  FakeClock clock;
  coordinator::MemoryStateStore store;
  std::unique_ptr<coordinator::CoordinatorService> service;
  std::unique_ptr<coordinator::CoordinatorGrpc> adapter;
  std::unique_ptr<GrpcServer> server;
  std::string address;
  std::unique_ptr<v1::Coordinator::Stub> stub;
};

// A frontend served in-process for two tenants, acme and beta.
struct Frontend {
  Frontend(const std::string& coordinator, const TlsFiles& client_tls = {},
           const TlsFiles& serve_tls = {}, const TlsFiles& connect_tls = {},
           int64_t max_calls_per_tenant = 64)
      : metrics(registry) {
    FrontendOptions o;
    o.coordinator_addresses = {coordinator};
    o.max_calls_per_tenant = max_calls_per_tenant;
    o.client_tls = client_tls;
    o.coordinator_timeout = absl::Seconds(5);
    auto auth = Authenticator::FromMap({{"tok-acme", "acme"}, {"tok-beta", "beta"}}).value();
    const model::Model* model = model::testing::SharedDefaultModel();
    service = FrontendService::Create(o, model, std::move(auth), kSecret, &metrics).value();
    grpc = std::make_unique<FrontendGrpc>(service.get(), &metrics);
    GrpcServerOptions options;
    options.tls = serve_tls;
    server = GrpcServer::Start(options, {grpc.get()}).value();
    stub = v1::Frontend::NewStub(
        ClientChannel(absl::StrCat("127.0.0.1:", server->port()), connect_tls).value());
  }
  ~Frontend() { server->Shutdown(absl::Now()); }

  static void Authorize(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  }
  grpc::Status GetSession(const std::string& token, const std::string& id,
                          v1::SessionInfo* info = nullptr) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::GetSessionResponse resp;
    grpc::Status st = stub->GetSession(&ctx, req, &resp);
    if (info != nullptr) *info = resp.session();
    return st;
  }
  grpc::Status EndSession(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::EndSessionRequest req;
    req.set_session_id(id);
    v1::EndSessionResponse resp;
    return stub->EndSession(&ctx, req, &resp);
  }
  grpc::Status ToolCallEnded(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::ToolCallEndedFrontendRequest req;
    req.set_session_id(id);
    v1::ToolCallEndedResponse resp;
    return stub->ToolCallEnded(&ctx, req, &resp);
  }
  static v1::GenerateRequest Request(const std::string& id) {
    v1::GenerateRequest req;
    req.set_session_id(id);
    v1::ChatMessage* m = req.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("Hello!");
    req.mutable_sampling()->set_max_tokens(8);
    return req;
  }
  grpc::Status Generate(const std::string& token, const v1::GenerateRequest& req,
                        std::vector<v1::GenerateEvent>* events = nullptr) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateEvent event;
    while (reader->Read(&event)) {
      if (events != nullptr) events->push_back(event);
    }
    return reader->Finish();
  }

  metrics::MetricsRegistry registry;
  FrontendMetrics metrics;
  std::unique_ptr<FrontendService> service;
  std::unique_ptr<FrontendGrpc> grpc;
  std::unique_ptr<GrpcServer> server;
  std::unique_ptr<v1::Frontend::Stub> stub;
};

// An address where nothing listens: a decode worker that is gone.
std::string DeadAddress() {
  auto probe = GrpcServer::Start({}, {}).value();
  const std::string address = absl::StrCat("127.0.0.1:", probe->port());
  probe->Shutdown(absl::Now());
  return address;
}

// A port that takes connections (the kernel's listen backlog) and never answers: a decode worker
// that hangs.
struct HungAddress {
  HungAddress() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(listen(fd, 16), 0);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    address = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  }
  ~HungAddress() { close(fd); }
  int fd;
  std::string address;
};

class FrontendGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(model::testing::SharedDefaultModel(), nullptr); }
  Coordinator coordinator_;
  Frontend frontend_{coordinator_.address};
};

TEST_F(FrontendGrpcTest, MissingOrUnknownTokenIsUnauthenticated) {
  for (const std::string token : {"", "tok-nobody"}) {
    EXPECT_EQ(frontend_.GetSession(token, "s1").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(frontend_.EndSession(token, "s1").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(frontend_.ToolCallEnded(token, "s1").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::Status st = frontend_.Generate(token, Frontend::Request("s1"));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  }
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Basic tok-acme");
  v1::GetSessionRequest req;
  req.set_session_id("s1");
  v1::GetSessionResponse resp;
  EXPECT_EQ(frontend_.stub->GetSession(&ctx, req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(frontend_.registry.Render(),
              HasSubstr("glimpse_frontend_requests_total{method=\"GetSession\",code="
                        "\"UNAUTHENTICATED\"} 3"));
}

TEST_F(FrontendGrpcTest, InvalidArgumentsNameFieldAndValue) {
  struct Case {
    std::function<void(v1::GenerateRequest&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_session_id("bad id"); }, "has the character 0x20"},
      {[](auto& r) { r.clear_chat(); }, "set exactly one of tokens, chat and text"},
      {[](auto& r) { r.mutable_tokens()->add_ids(1 << 20); }, "tokens.ids[0] = 1048576"},
      {[](auto& r) { r.mutable_policy()->set_method("magic"); }, "policy.method \"magic\""},
      {[](auto& r) { r.mutable_sampling()->set_top_p(2); }, "sampling.top_p = 2"},
      {[](auto& r) { r.mutable_sampling()->set_max_tokens(100000); }, "sampling.max_tokens"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req = Frontend::Request("s1");
    c.edit(req);
    grpc::Status st = frontend_.Generate("tok-acme", req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.expect;
    EXPECT_THAT(st.error_message(), HasSubstr(c.expect));
  }
  EXPECT_THAT(frontend_.GetSession("tok-acme", "").error_message(), HasSubstr("session_id"));
}

TEST_F(FrontendGrpcTest, NoDecodeWorkerIsUnavailable) {
  grpc::Status st = frontend_.Generate("tok-acme", Frontend::Request("s1"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("RouteTurn: no live decode worker is registered"));
  EXPECT_THAT(st.error_message(), HasSubstr(coordinator_.address));
}

// The OpenAI API in front of the same service: the bearer token travels as the call's metadata,
// and gRPC errors come back as OpenAI error bodies with their HTTP status.
TEST_F(FrontendGrpcTest, TheOpenAiApiForwardsTheTokenAndMapsErrorsToHttp) {
  OpenAiServerOptions o;
  o.model_id = "test-model";
  auto api = OpenAiServer::Start(o, frontend_.server->InProcessChannel(), frontend_.registry);
  ASSERT_TRUE(api.ok()) << api.status();
  httplib::Client http("127.0.0.1", (*api)->port());
  const std::string body = R"({"messages": [{"role": "user", "content": "Hi"}]})";
  auto anonymous = http.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, HasSubstr("\"type\":\"authentication_error\""));

  http.set_bearer_token_auth("tok-acme");
  auto routed = http.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(routed);
  EXPECT_EQ(routed->status, 503);
  EXPECT_THAT(routed->body, HasSubstr("no live decode worker is registered"));
  auto bad =
      http.Post("/v1/completions", R"({"prompt": "x", "max_tokens": -1})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(bad->body, HasSubstr("max_tokens: -1 is outside"));
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_THAT(models->body, HasSubstr("\"id\":\"test-model\""));
  EXPECT_THAT(frontend_.registry.Render(),
              HasSubstr("glimpse_frontend_requests_total{method=\"Generate\",code="
                        "\"UNAUTHENTICATED\"} 1"));
  EXPECT_THAT(
      frontend_.registry.Render(),
      HasSubstr("glimpse_frontend_http_requests_total{endpoint=\"chat\",status=\"503\"} 1"));
}

TEST_F(FrontendGrpcTest, CoordinatorDownIsUnavailable) {
  Frontend orphan(DeadAddress());
  grpc::Status st = orphan.GetSession("tok-acme", "s1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("coordinator 127.0.0.1:"));
}

TEST_F(FrontendGrpcTest, WorkerFailingMidTurnEndsTheTurnAndIsUnavailable) {
  const std::string dead = DeadAddress();
  coordinator_.RegisterDecode("d1", dead);
  grpc::Status st = frontend_.Generate("tok-acme", Frontend::Request("s1"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("decode worker d1 at " + dead + " failed mid-turn"));
  // The turn was ended as failed: no lease, nothing reserved, and the next turn routes again.
  v1::SessionInfo info;
  ASSERT_TRUE(coordinator_.Session(ScopedSessionId("acme", "s1"), &info).ok());
  EXPECT_EQ(info.tenant(), "acme");
  EXPECT_EQ(info.tier(), v1::SESSION_TIER_WARM);
  EXPECT_EQ(info.kv_tokens(), 0);
  EXPECT_EQ(info.reserved_bytes(), 0);
  EXPECT_EQ(info.turns(), 1);
  coordinator_.clock.Advance(absl::Milliseconds(1));  // FakeClock: turns at distinct instants
  EXPECT_EQ(frontend_.Generate("tok-acme", Frontend::Request("s1")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(coordinator_.Session(ScopedSessionId("acme", "s1"), &info).ok());
  EXPECT_EQ(info.turns(), 2);
  EXPECT_NE(info.tier(), v1::SESSION_TIER_ACTIVE);
  EXPECT_EQ(info.reserved_bytes(), 0);
  const std::string metrics = frontend_.registry.Render();
  EXPECT_THAT(metrics, HasSubstr("glimpse_frontend_worker_failures_total 2"));
  EXPECT_THAT(metrics, HasSubstr("method=\"Generate\",code=\"UNAVAILABLE\"} 2"));
}

// A tenant with limits.max_calls_per_tenant Generate calls in flight gets RESOURCE_EXHAUSTED for
// one more at once; another tenant's call goes on.
TEST_F(FrontendGrpcTest, ATenantPastItsCallsInFlightIsRefusedAndOthersAreNot) {
  HungAddress hung;
  coordinator_.RegisterDecode("d1", hung.address);
  Frontend limited(coordinator_.address, {}, {}, {}, /*max_calls_per_tenant=*/1);
  grpc::ClientContext held;
  Frontend::Authorize(&held, "tok-acme");
  auto reader = limited.stub->Generate(&held, Frontend::Request("s1"));
  // Routed (so past the limit check) and hanging on the worker.
  v1::SessionInfo info;
  while (!coordinator_.Session(ScopedSessionId("acme", "s1"), &info).ok() ||
         info.tier() != v1::SESSION_TIER_ACTIVE) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  grpc::Status refused = limited.Generate("tok-acme", Frontend::Request("s2"));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("tenant acme has 1 Generate calls in flight"));
  EXPECT_FALSE(coordinator_.Session(ScopedSessionId("acme", "s2"), &info).ok());  // never routed
  // beta's call is routed too (past the limit check; it then hangs on the same worker).
  grpc::ClientContext beta_ctx;
  Frontend::Authorize(&beta_ctx, "tok-beta");
  auto beta = limited.stub->Generate(&beta_ctx, Frontend::Request("s1"));
  while (!coordinator_.Session(ScopedSessionId("beta", "s1"), &info).ok() ||
         info.tier() != v1::SESSION_TIER_ACTIVE) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  v1::GenerateEvent event;
  beta_ctx.TryCancel();
  while (beta->Read(&event)) {
  }
  EXPECT_EQ(beta->Finish().error_code(), grpc::StatusCode::CANCELLED);
  held.TryCancel();
  while (reader->Read(&event)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(FrontendGrpcTest, AnotherTenantsSessionLooksUnknown) {
  coordinator_.RegisterDecode("d1", DeadAddress());
  // What beta sees for ids nobody has used yet.
  grpc::Status get_before = frontend_.GetSession("tok-beta", "s1");
  grpc::Status end_before = frontend_.EndSession("tok-beta", "s1");
  grpc::Status tool_before = frontend_.ToolCallEnded("tok-beta", "s1");
  grpc::Status gen_never = frontend_.Generate("tok-beta", Frontend::Request("never-seen"));
  ASSERT_EQ(get_before.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(get_before.error_message(), "session \"s1\" not found");

  // acme starts s1 (its turn fails on the dead worker, but the session exists).
  (void)frontend_.Generate("tok-acme", Frontend::Request("s1"));
  v1::SessionInfo mine;
  ASSERT_TRUE(frontend_.GetSession("tok-acme", "s1", &mine).ok());
  EXPECT_EQ(mine.session_id(), "s1");
  EXPECT_EQ(mine.tenant(), "acme");
  EXPECT_EQ(mine.turns(), 1);

  // beta gets exactly what it got before s1 existed.
  grpc::Status get_after = frontend_.GetSession("tok-beta", "s1");
  grpc::Status end_after = frontend_.EndSession("tok-beta", "s1");
  grpc::Status tool_after = frontend_.ToolCallEnded("tok-beta", "s1");
  EXPECT_EQ(get_after.error_code(), get_before.error_code());
  EXPECT_EQ(get_after.error_message(), get_before.error_message());
  EXPECT_EQ(end_after.error_code(), end_before.error_code());
  EXPECT_EQ(end_after.error_message(), end_before.error_message());
  EXPECT_EQ(tool_after.error_code(), tool_before.error_code());
  EXPECT_EQ(tool_after.error_message(), tool_before.error_message());
  // beta's Generate on s1 is a new session of beta's, answered as for a never-seen id (up to the
  // transport's own words for the dead worker).
  grpc::Status gen_after = frontend_.Generate("tok-beta", Frontend::Request("s1"));
  auto head = [](const grpc::Status& st) {
    return st.error_message().substr(0, st.error_message().find("failed mid-turn"));
  };
  EXPECT_EQ(gen_after.error_code(), gen_never.error_code());
  EXPECT_EQ(gen_never.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(head(gen_after), head(gen_never));
  v1::SessionInfo theirs;
  ASSERT_TRUE(coordinator_.Session(ScopedSessionId("beta", "s1"), &theirs).ok());
  EXPECT_EQ(theirs.tenant(), "beta");
  // acme's session was not touched.
  ASSERT_TRUE(frontend_.GetSession("tok-acme", "s1", &mine).ok());
  EXPECT_EQ(mine.turns(), 1);
  EXPECT_TRUE(frontend_.EndSession("tok-acme", "s1").ok());
  EXPECT_EQ(frontend_.GetSession("tok-acme", "s1").error_message(), "session \"s1\" not found");
}

TEST_F(FrontendGrpcTest, ForeignRecordUnderOwnScopedIdIsNotFound) {
  // A record under acme's scoped id written by someone else for tenant beta (not via a frontend).
  coordinator_.RegisterDecode("d1", DeadAddress());
  const grpc::Status never = frontend_.GetSession("tok-acme", "x");
  v1::RouteTurnRequest req;
  req.set_session_id(ScopedSessionId("acme", "x"));
  req.set_tenant("beta");
  req.set_new_tokens(5);
  v1::RouteTurnResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(coordinator_.stub->RouteTurn(&ctx, req, &resp).ok());
  grpc::Status st = frontend_.GetSession("tok-acme", "x");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), never.error_message());
  EXPECT_EQ(frontend_.EndSession("tok-acme", "x").error_message(), never.error_message());
  grpc::Status gen = frontend_.Generate("tok-acme", Frontend::Request("x"));
  EXPECT_EQ(gen.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(gen.error_message(), never.error_message());
}

class FrontendTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir =
        glimpse::testing::MakeTestCertificates("glimpse_frontend_tls");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    // The frontend's client certificate names it (identity.h): internal services check roles.
    CertificateSpec client;
    client.name = "client";
    client.role = std::string(roles::kFrontend);
    client.id = "f0";
    ASSERT_TRUE(MakeCertificates(dir_, {client}).ok());
  }
  static void TearDownTestSuite() { std::system(absl::StrCat("rm -rf ", dir_).c_str()); }
  static std::string File(const std::string& name) { return dir_ + "/" + name; }
  static TlsFiles Server(bool mutual) {
    return {File("server.pem"), File("server.key"), mutual ? File("ca.pem") : ""};
  }
  static TlsFiles Client(bool with_cert) {
    return {with_cert ? File("client.pem") : "", with_cert ? File("client.key") : "",
            File("ca.pem")};
  }
  static std::string dir_;
};
std::string FrontendTlsTest::dir_;

TEST_F(FrontendTlsTest, MutualTlsToTheCoordinator) {
  Coordinator coordinator(Server(/*mutual=*/true), Client(/*with_cert=*/true));
  Frontend good(coordinator.address, Client(/*with_cert=*/true));
  // NOT_FOUND is the coordinator's answer: the call went through.
  EXPECT_EQ(good.GetSession("tok-acme", "s1").error_code(), grpc::StatusCode::NOT_FOUND);
  Frontend plaintext(coordinator.address);
  grpc::Status st = plaintext.GetSession("tok-acme", "s1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("coordinator " + coordinator.address));
  Frontend no_client_cert(coordinator.address, Client(/*with_cert=*/false));
  EXPECT_EQ(no_client_cert.GetSession("tok-acme", "s1").error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(FrontendTlsTest, ServesTls) {
  Coordinator coordinator;
  Frontend frontend(coordinator.address, {}, Server(/*mutual=*/false), Client(false));
  EXPECT_EQ(frontend.GetSession("tok-acme", "s1").error_code(), grpc::StatusCode::NOT_FOUND);
}

// The binary: --help, a bad configuration, and serving until SIGTERM.
TEST(FrontendBinaryTest, HelpAndBadConfig) {
  const std::string bin = GLIMPSE_FRONTEND_BIN;
  EXPECT_EQ(std::system((bin + " --help | grep -q auth.tokens_file").c_str()), 0);
  const int rc = std::system((bin + " 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);  // coordinator is required
}

TEST(FrontendBinaryTest, ServesUntilSigterm) {
  Coordinator coordinator;
  const std::string log = model::testing::MakeTempDir("frontend_bin") + "/stderr";
  const std::string coord = "--coordinator=" + coordinator.address;
  const std::string model = "--model=" + model::DefaultModelPath();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execl(GLIMPSE_FRONTEND_BIN, "glimpse-frontend", coord.c_str(), model.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string text;
  for (int i = 0; i < 300 && text.find("\"serving\"") == std::string::npos; ++i) {
    usleep(100'000);
    std::ifstream in(log);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_THAT(text, HasSubstr("\"msg\":\"serving\""));
  EXPECT_THAT(text, HasSubstr("random salt secret"));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
}

}  // namespace
}  // namespace glimpse::frontend

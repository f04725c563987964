// The whole system as separate processes on loopback — glimpse-coordinator, glimpse-cache-node,
// glimpse-decode-worker, glimpse-prefill-worker and glimpse-frontend, real UCX, real RocksDB, the
// default model — driven through the Frontend API: a session's turns are recomputed, hot and warm;
// a long prompt prefills on the prefill worker, which ships the kept KV to the decode worker; a
// replayed
// conversation reuses the stored state; a decode worker killed mid-session leaves the session to
// continue warm on another worker; a cache node killed and restarted still serves every state it
// acknowledged; one tenant cannot hit another's stored state; UCX engines nobody registered are
// refused; the tokens it serves after eviction and shipping are NVIDIA kvpress's. Every internal
// call is mutual TLS with a throwaway CA (each process its own certificate and identity), as in a
// deployment; the frontend's client API is plaintext on loopback.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/common/grpc/certificates.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/server.h"
#include "core/common/http_server.h"
#include "core/common/service_process.h"
#include "core/transport/ucx/ucx_transport.h"
#include "glimpse/v1/cache_node.grpc.pb.h"
#include "glimpse/v1/coordinator.grpc.pb.h"
#include "glimpse/v1/decode_worker.grpc.pb.h"
#include "glimpse/v1/frontend.grpc.pb.h"
#include "glimpse/v1/prefill_worker.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse {
namespace {

namespace fs = std::filesystem;

struct Turn {
  grpc::Status status;
  v1::TurnStarted started;
  v1::TurnDone done;
  v1::TurnLease lease;
  std::string text;
  std::string worker;
  std::string prefill_worker;
  v1::PrefillResponse prefill;
};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("glimpse_cluster_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    coordinator_ = Start(
        "coordinator", GLIMPSE_COORDINATOR_BINARY,
        {"--store.path=" + (dir_ / "coordinator").string(), "--membership.heartbeat_interval=300ms",
         "--lease.fixed_ttl=1h", "--lease.max_ttl=2h"},
        roles::kCoordinator, "coordinator-0");
    cache_address_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort().value());
    cache_ = StartCacheNode();
    decode_ = StartDecodeWorker("d1");
    frontend_ = Start("frontend", GLIMPSE_FRONTEND_BINARY,
                      {"--coordinator=" + coordinator_->grpc_address(), "--policy.method=snapkv",
                       "--policy.budget_ratio=0.5", "--policy.codec=int8"},
                      roles::kFrontend, "frontend-0");
    auto channel = ClientChannel(frontend_->grpc_address());
    ASSERT_TRUE(channel.ok());
    stub_ = v1::Frontend::NewStub(*channel);
    auto coordinator_channel =
        ClientChannel(coordinator_->grpc_address(), Certificate(roles::kAdmin, "cluster-test"));
    ASSERT_TRUE(coordinator_channel.ok());
    coordinator_stub_ = v1::Coordinator::NewStub(*coordinator_channel);
    ASSERT_TRUE(AwaitNodes(1));
  }
  void TearDown() override {
    if (HasFailure()) {
      for (const auto& entry : fs::directory_iterator(dir_)) {
        if (entry.path().extension() == ".log") {
          std::cerr << "--- " << entry.path() << "\n" << Tail(entry.path().string(), 3000);
        }
      }
    }
    frontend_.reset();
    decode_.reset();
    cache_.reset();
    coordinator_.reset();
    fs::remove_all(dir_);
  }

  // The certificate of `role`/`id` under dir_/tls (made on first use; one CA for the test).
  TlsFiles Certificate(std::string_view role, const std::string& id) {
    CertificateSpec spec;
    spec.name = absl::StrCat(std::string(role), "-", id);
    spec.role = std::string(role);
    spec.id = id;
    const std::string tls = (dir_ / "tls").string();
    if (!fs::exists(tls + "/" + spec.name + ".pem")) {
      const absl::Status made = MakeCertificates(tls, {spec}, 1);
      EXPECT_TRUE(made.ok()) << made;
    }
    return CertificateFiles(tls, spec.name);
  }
  // Starts `binary` as `role`/`id`: serving mutual TLS (the frontend's client API: plaintext) and
  // calling the others with its certificate (the coordinator calls no one).
  std::unique_ptr<ServiceProcess> Start(const std::string& name, const std::string& binary,
                                        std::vector<std::string> args, std::string_view role,
                                        const std::string& id) {
    const TlsFiles tls = Certificate(role, id);
    if (role != roles::kFrontend) {
      args.insert(args.end(), {"--tls.cert=" + tls.cert_file, "--tls.key=" + tls.key_file,
                               "--tls.client_ca=" + tls.ca_file});
    }
    if (role != roles::kCoordinator) {
      args.insert(args.end(),
                  {"--client_tls.cert=" + tls.cert_file, "--client_tls.key=" + tls.key_file,
                   "--client_tls.ca=" + tls.ca_file});
    }
    args.push_back("--shutdown_grace=500ms");
    absl::StatusOr<ServiceProcess> p =
        ServiceProcess::Start(binary, args, (dir_ / (name + ".log")).string());
    EXPECT_TRUE(p.ok()) << name << ": " << p.status();
    return p.ok() ? std::make_unique<ServiceProcess>(*std::move(p)) : nullptr;
  }
  // Cache node `id` (cache-0 is the fixture's) on `address`.
  std::unique_ptr<ServiceProcess> StartCacheNode(const std::string& id = "cache-0",
                                                 const std::string& address = "") {
    return Start(id == "cache-0" ? "cache-node" : id, GLIMPSE_CACHE_NODE_BINARY,
                 {"--storage.path=" + (dir_ / id).string(),
                  "--listen=" + (address.empty() ? cache_address_ : address),
                  "--coordinator=" + coordinator_->grpc_address(), "--node_id=" + id},
                 roles::kCache, id);
  }
  std::unique_ptr<ServiceProcess> StartDecodeWorker(const std::string& id) {
    std::vector<std::string> args = {
        "--coordinator=" + coordinator_->grpc_address(),
        "--cache_node=" + (cache_nodes_.empty() ? cache_address_ : cache_nodes_), "--node_id=" + id,
        "--threads=2"};
    args.insert(args.end(), worker_args_.begin(), worker_args_.end());
    return Start("decode-" + id, GLIMPSE_DECODE_WORKER_BINARY, args, roles::kDecode, id);
  }

  std::unique_ptr<ServiceProcess> StartPrefillWorker(const std::string& id) {
    std::vector<std::string> args = {"--coordinator=" + coordinator_->grpc_address(),
                                     "--cache_node=" + cache_address_, "--node_id=" + id,
                                     "--threads=2"};
    args.insert(args.end(), worker_args_.begin(), worker_args_.end());
    return Start("prefill-" + id, GLIMPSE_PREFILL_WORKER_BINARY, args, roles::kPrefill, id);
  }

  // Waits until the coordinator sees `n` live nodes of `role` (and, with `only`, that the first of
  // them is that node).
  bool AwaitNodes(int n, v1::NodeRole role = v1::NODE_ROLE_DECODE, const std::string& only = "") {
    for (int i = 0; i < 400; ++i) {
      grpc::ClientContext ctx;
      v1::ListNodesRequest req;
      req.set_role(role);
      v1::ListNodesResponse resp;
      if (coordinator_stub_->ListNodes(&ctx, req, &resp).ok() && resp.nodes_size() == n &&
          (only.empty() || resp.nodes(0).node_id() == only)) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  Turn Generate(const std::string& session, const std::vector<std::string>& conversation,
                v1::Frontend::Stub* stub = nullptr, const std::string& token = "") {
    v1::GenerateRequest req;
    req.set_session_id(session);
    for (size_t i = 0; i < conversation.size(); ++i) {
      v1::ChatMessage* m = req.mutable_chat()->add_messages();
      m->set_role(i % 2 == 0 ? "user" : "assistant");
      m->set_content(conversation[i]);
    }
    req.mutable_sampling()->set_max_tokens(12);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto reader = (stub != nullptr ? stub : stub_.get())->Generate(&ctx, req);
    Turn t;
    v1::GenerateEvent e;
    while (reader->Read(&e)) {
      if (e.has_started()) {
        t.started = e.started();
        t.worker = e.decode_worker_id();
        t.prefill_worker = e.prefill_worker_id();
        t.prefill = e.prefill();
      }
      if (e.has_tokens()) t.text += e.tokens().text();
      if (e.has_done()) t.done = e.done();
      if (e.has_lease()) t.lease = e.lease();
    }
    t.status = reader->Finish();
    return t;
  }

  grpc::Status EndSession(const std::string& session, v1::Frontend::Stub* stub = nullptr,
                          const std::string& token = "") {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::EndSessionRequest req;
    req.set_session_id(session);
    v1::EndSessionResponse resp;
    return (stub != nullptr ? stub : stub_.get())->EndSession(&ctx, req, &resp);
  }

  std::vector<std::string> worker_args_;  // extra flags of every worker (set before SetUp)
  std::string cache_nodes_;  // a decode worker's cache_node, when not cache_address_ alone
  fs::path dir_;
  std::string cache_address_;
  std::unique_ptr<ServiceProcess> coordinator_, cache_, decode_, frontend_;
  std::unique_ptr<v1::Frontend::Stub> stub_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_stub_;
};

const std::vector<std::string> kTurn1 = {"What is the capital of France?"};

std::vector<std::string> NextTurn(std::vector<std::string> conversation, const Turn& answer,
                                  const std::string& user) {
  conversation.push_back(answer.text);
  conversation.push_back(user);
  return conversation;
}

TEST_F(ClusterTest, TurnsAreRecomputedThenHotThenWarmAndReplaysReuseState) {
  Turn t1 = Generate("s1", kTurn1);
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  EXPECT_EQ(t1.started.source(), v1::STATE_SOURCE_RECOMPUTE);
  EXPECT_EQ(t1.worker, "d1");
  EXPECT_FALSE(t1.text.empty());
  EXPECT_GT(t1.done.state_bytes(), 0u);  // stored before "done"
  // The state key stays inside the cluster: the event clients get has no field for it.
  EXPECT_EQ(v1::TurnDone::descriptor()->FindFieldByName("state_key"), nullptr);
  EXPECT_GT(t1.lease.ttl_ms(), 0);

  const auto conversation2 = NextTurn(kTurn1, t1, "Name one museum there.");
  Turn t2 = Generate("s1", conversation2);
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(t2.started.source(), v1::STATE_SOURCE_HOT);
  EXPECT_GT(t2.started.reused_tokens(), 0);
  EXPECT_LT(t2.done.retained_bytes(), t2.done.full_fp16_bytes());

  // The session ends (its hot copy is dropped); the same conversation replayed under a new
  // session finds the stored state: content-addressed, not tied to the session id.
  ASSERT_TRUE(EndSession("s1").ok());
  Turn replay = Generate("s2", conversation2);
  ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
  EXPECT_EQ(replay.started.source(), v1::STATE_SOURCE_WARM);
  EXPECT_EQ(replay.started.reused_tokens(), t2.started.reused_tokens());
  EXPECT_EQ(replay.text, t2.text);  // greedy, same state

  // The warm load came through the decode worker's cache client, one of its two engines (the
  // first: one call at a time); both are on /metrics.
  const std::string metrics =
      HttpGet("127.0.0.1", decode_->metrics_port(), "/metrics").value_or("");
  const std::string received = "glimpse_decode_worker_cache_transport_bytes_received_total";
  const size_t first = metrics.find(received + "{engine=\"0\"} ");
  ASSERT_NE(first, std::string::npos) << metrics;
  EXPECT_GT(std::stod(metrics.substr(first + received.size() + 13)), 0.0) << metrics;
  EXPECT_NE(metrics.find(received + "{engine=\"1\"} "), std::string::npos) << metrics;
}

// Prompts over the coordinator's routing.prefill_on_decode_tokens (128) prefill on a prefill
// worker when one is registered.
TEST_F(ClusterTest, ALongPromptPrefillsOnThePrefillWorkerAndTheDecodeWorkerContinuesFromIt) {
  auto p1 = StartPrefillWorker("p1");
  ASSERT_NE(p1, nullptr);
  ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_PREFILL));
  std::string long_prompt;
  for (int i = 0; i < 12; ++i) long_prompt += "The Seine flows through Paris to the sea. ";
  long_prompt += "Where does the river flow?";
  Turn t1 = Generate("s1", {long_prompt});
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  EXPECT_EQ(t1.started.source(), v1::STATE_SOURCE_PREFILL_WORKER);
  EXPECT_EQ(t1.prefill_worker, "p1");
  EXPECT_EQ(t1.prefill.source(), v1::STATE_SOURCE_RECOMPUTE);
  EXPECT_GT(t1.prefill.prefilled_tokens(), 128);
  EXPECT_EQ(t1.started.reused_tokens(), t1.prefill.delivered_tokens());
  EXPECT_EQ(t1.started.prefilled_tokens(), 1);  // the decode worker's share: the last token
  EXPECT_GT(t1.prefill.shipped_bytes(), 0u);
  EXPECT_GT(t1.prefill.stored_bytes(), t1.prefill.shipped_bytes());  // the evicted pages too
  EXPECT_LT(t1.prefill.kept_entries(), t1.prefill.total_entries());

  Turn t2 = Generate("s1", NextTurn({long_prompt}, t1, "And then?"));
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(t2.started.source(), v1::STATE_SOURCE_HOT);  // a short turn: on the decode worker

  // A long turn while the session is hot: the prefill worker starts from the state the decode
  // worker holds and ships only a delta against it.
  std::string more;
  for (int i = 0; i < 16; ++i) more += "The Loire flows through Tours to the ocean. ";
  Turn t3 = Generate("s1", NextTurn(NextTurn({long_prompt}, t1, "And then?"), t2,
                                    more + "Which river is longer?"));
  ASSERT_TRUE(t3.status.ok()) << t3.status.error_message();
  EXPECT_EQ(t3.started.source(), v1::STATE_SOURCE_PREFILL_WORKER);
  EXPECT_TRUE(t3.prefill.delta());
  EXPECT_EQ(t3.prefill.source(), v1::STATE_SOURCE_WARM);
  // Turn 1 shipped every kept entry; turn 3 only those the hot copy lacked.
  auto bytes_per_kept_entry = [](const Turn& t) {
    return static_cast<double>(t.prefill.shipped_bytes()) / t.prefill.kept_entries();
  };
  EXPECT_LT(bytes_per_kept_entry(t3), 0.9 * bytes_per_kept_entry(t1));

  // The first turn replayed in another session: the prefill worker starts from its stored state.
  Turn replay = Generate("s2", {long_prompt});
  ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
  EXPECT_EQ(replay.started.source(), v1::STATE_SOURCE_PREFILL_WORKER);
  EXPECT_EQ(replay.prefill.source(), v1::STATE_SOURCE_WARM);
  EXPECT_EQ(replay.prefill.prefilled_tokens(), 0);
  EXPECT_EQ(replay.text, t1.text);

  // Without the prefill worker a long turn still runs: the decode worker prefills it.
  p1->Kill();
  Turn alone = Generate("s3", {long_prompt + " Answer briefly."});
  ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
  EXPECT_EQ(alone.started.source(), v1::STATE_SOURCE_RECOMPUTE);
}

TEST_F(ClusterTest, ADecodeWorkerKilledMidSessionLeavesTheSessionToContinueWarm) {
  Turn t1 = Generate("s1", kTurn1);
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  ASSERT_EQ(t1.worker, "d1");
  decode_->Kill();
  auto d2 = StartDecodeWorker("d2");
  ASSERT_NE(d2, nullptr);
  // d1 is declared dead after 3 missed heartbeats (0.9 s); then only d2 is alive (one live node
  // is not enough: it may still be d1, before d2 registered).
  ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_DECODE, "d2"));
  const auto conversation2 = NextTurn(kTurn1, t1, "Name one museum there.");
  Turn t2 = Generate("s1", conversation2);
  if (!t2.status.ok()) {
    // Routed to d1 before it was declared dead: a clear error, and the next turn goes warm.
    EXPECT_EQ(t2.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(t2.status.error_message().find("decode worker d1"), std::string::npos);
    t2 = Generate("s1", conversation2);
  }
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(t2.worker, "d2");
  EXPECT_EQ(t2.started.source(), v1::STATE_SOURCE_WARM);
  EXPECT_GT(t2.started.reused_tokens(), 0);
}

TEST_F(ClusterTest, AcknowledgedStatesSurviveACacheNodeKill) {
  Turn t1 = Generate("s1", kTurn1);
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  ASSERT_GT(t1.done.state_bytes(), 0u);  // acknowledged: durable before "done"
  cache_->Kill();
  cache_ = StartCacheNode();
  ASSERT_NE(cache_, nullptr);
  ASSERT_TRUE(EndSession("s1").ok());  // no hot copy: the next turn must load
  Turn t2 = Generate("s2", NextTurn(kTurn1, t1, "Name one museum there."));
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(t2.started.source(), v1::STATE_SOURCE_WARM);
  EXPECT_GT(t2.started.reused_tokens(), 0);
}

// Three cache nodes, each state on two: the node that holds a session's state dies, and the next
// turn still loads it (from the other copy) rather than recompute.
TEST_F(ClusterTest, WithThreeCacheNodesATurnStaysWarmWhenANodeHoldingItsStateDies) {
  std::map<std::string, std::string> addresses = {{"cache-0", cache_address_}};
  std::map<std::string, std::unique_ptr<ServiceProcess>> extra;
  for (const char* id : {"cache-1", "cache-2"}) {
    addresses[id] = "127.0.0.1:" + std::to_string(FreeLoopbackPort().value());
    extra[id] = StartCacheNode(id, addresses[id]);
    ASSERT_NE(extra[id], nullptr);
  }
  // The fixture's worker knows one cache node: a worker that knows the three replaces it.
  decode_->Kill();
  cache_nodes_ =
      absl::StrCat(addresses["cache-0"], ",", addresses["cache-1"], ",", addresses["cache-2"]);
  worker_args_.push_back("--cache_replicas=2");
  auto d2 = StartDecodeWorker("d2");
  ASSERT_NE(d2, nullptr);
  ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_DECODE, "d2"));
  Turn t1 = Generate("s1", kTurn1);
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  ASSERT_EQ(t1.worker, "d2");
  ASSERT_GT(t1.done.state_bytes(), 0u);
  ASSERT_TRUE(EndSession("s1").ok());  // no hot copy: the next turn must load

  // Kill a node that holds states (two of the three do).
  const TlsFiles admin = Certificate(roles::kAdmin, "cluster-test");
  std::string holder;
  int holders = 0;
  for (const auto& [id, address] : addresses) {
    auto stub = v1::CacheNode::NewStub(ClientChannel(address, admin).value());
    grpc::ClientContext ctx;
    v1::CacheStatsResponse stats;
    ASSERT_TRUE(stub->Stats(&ctx, v1::CacheStatsRequest(), &stats).ok()) << id;
    if (stats.states() > 0) {
      holder = id;
      ++holders;
    }
  }
  EXPECT_EQ(holders, 2);
  ASSERT_FALSE(holder.empty());
  (holder == "cache-0" ? cache_ : extra[holder])->Kill();

  Turn t2 = Generate("s2", NextTurn(kTurn1, t1, "Name one museum there."));
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(t2.started.source(), v1::STATE_SOURCE_WARM);
  EXPECT_GT(t2.started.reused_tokens(), 0);
}

// Two tenants behind a frontend with bearer tokens: the same conversation under another tenant is
// another namespace (salted state keys), so it can neither hit nor probe the first tenant's state.
TEST_F(ClusterTest, ATenantCannotHitAnotherTenantsStoredState) {
  const fs::path tokens = dir_ / "tokens.yaml", secret = dir_ / "salt_secret";
  std::ofstream(tokens) << "tok-acme: acme\ntok-beta: beta\n";
  std::ofstream(secret) << "a-cluster-wide-secret-of-enough-bytes\n";
  auto secured =
      Start("frontend-auth", GLIMPSE_FRONTEND_BINARY,
            {"--coordinator=" + coordinator_->grpc_address(),
             "--auth.tokens_file=" + tokens.string(), "--auth.salt_secret_file=" + secret.string()},
            roles::kFrontend, "frontend-auth");
  ASSERT_NE(secured, nullptr);
  auto channel = ClientChannel(secured->grpc_address());
  ASSERT_TRUE(channel.ok());
  auto stub = v1::Frontend::NewStub(*channel);

  EXPECT_EQ(Generate("s1", kTurn1, stub.get()).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  Turn a = Generate("s1", kTurn1, stub.get(), "tok-acme");
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  const auto conversation = NextTurn(kTurn1, a, "Name one museum there.");
  ASSERT_TRUE(EndSession("s1", stub.get(), "tok-acme").ok());
  Turn beta = Generate("s1", conversation, stub.get(), "tok-beta");
  ASSERT_TRUE(beta.status.ok()) << beta.status.error_message();
  EXPECT_EQ(beta.started.source(), v1::STATE_SOURCE_RECOMPUTE);
  Turn again = Generate("s2", conversation, stub.get(), "tok-acme");
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.started.source(), v1::STATE_SOURCE_WARM);  // acme's own state
}

// The UCX peer allowlist end to end: the decode worker's inbox refuses a batch from an engine
// nobody registered; registered nodes' traffic flows (every other test here). The cache node's
// refusals are cache_node_service_test's.
TEST_F(ClusterTest, EnginesNobodyRegisteredAreRefused) {
  ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_CACHE));
  v1::ListNodesRequest lr;
  lr.set_role(v1::NODE_ROLE_DECODE);
  v1::ListNodesResponse nodes;
  grpc::ClientContext lctx;
  ASSERT_TRUE(coordinator_stub_->ListNodes(&lctx, lr, &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).client_ucx_addresses_size(),
            2);  // its cache client's engines (cache_engines)

  absl::StatusOr<std::unique_ptr<transport::Transport>> outsider = transport::CreateUcxTransport();
  ASSERT_TRUE(outsider.ok()) << outsider.status();
  absl::StatusOr<transport::PeerId> inbox = (*outsider)->Connect(nodes.nodes(0).ucx_address());
  ASSERT_TRUE(inbox.ok()) << inbox.status();
  std::vector<uint8_t> bytes(4096, 7);
  std::vector<std::span<const uint8_t>> batch = {bytes};
  absl::StatusOr<transport::TransferId> id = (*outsider)->Submit(*inbox, batch);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE((*outsider)->Wait(*id, absl::Now() + absl::Seconds(10)).ok());
  const std::string refused = "glimpse_decode_worker_transport_peers_refused_total 1";
  std::string metrics;
  for (int i = 0; i < 200 && metrics.find(refused) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = HttpGet("127.0.0.1", decode_->metrics_port(), "/metrics").value_or("");
  }
  EXPECT_NE(metrics.find(refused), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("glimpse_decode_worker_deliveries_total{outcome=\"rejected\"} 1"),
            std::string::npos);
}

// Nobody inside the network is trusted: a caller without a certificate from the cluster's CA does
// not get a connection to any internal service, and one with a certificate calls only what its role
// may (the frontend routes turns and runs them, workers read and write the cache node, a node
// heartbeats only as itself, a worker's cache replies go only to its own engines). The cluster
// keeps serving meanwhile.
TEST_F(ClusterTest, InternalServicesServeOnlyTheRolesTheirCallsAreFor) {
  ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_CACHE));
  auto channel = [](const std::string& address, const TlsFiles& tls) {
    return *ClientChannel(address, tls);
  };
  auto call = [](auto&& rpc) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return rpc(&ctx).error_code();
  };
  const TlsFiles none;  // plaintext
  const TlsFiles frontend = Certificate(roles::kFrontend, "frontend-0");
  const TlsFiles worker = Certificate(roles::kDecode, "d1");
  const TlsFiles other_worker = Certificate(roles::kDecode, "d9");
  const std::string decode = decode_->grpc_address();

  auto heartbeat_d1 = [&](const TlsFiles& tls) {
    auto stub = v1::Coordinator::NewStub(channel(coordinator_->grpc_address(), tls));
    return call([&](grpc::ClientContext* ctx) {
      v1::HeartbeatRequest req;
      req.set_node_id("d1");
      v1::HeartbeatResponse resp;
      return stub->Heartbeat(ctx, req, &resp);
    });
  };
  auto cache_lookup = [&](const TlsFiles& tls) {
    auto stub = v1::CacheNode::NewStub(channel(cache_address_, tls));
    return call([&](grpc::ClientContext* ctx) {
      v1::CacheLookupRequest req;
      v1::CacheLookupResponse resp;
      return stub->Lookup(ctx, req, &resp);
    });
  };
  auto release = [&](const TlsFiles& tls) {
    auto stub = v1::DecodeWorker::NewStub(channel(decode, tls));
    return call([&](grpc::ClientContext* ctx) {
      v1::ReleaseSessionRequest req;
      req.set_session_id("s1");
      v1::ReleaseSessionResponse resp;
      return stub->ReleaseSession(ctx, req, &resp);
    });
  };
  for (const auto& rpc :
       {std::function(heartbeat_d1), std::function(cache_lookup), std::function(release)}) {
    EXPECT_EQ(rpc(none), grpc::StatusCode::UNAVAILABLE);  // no certificate: no connection
  }
  EXPECT_EQ(heartbeat_d1(frontend), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(heartbeat_d1(other_worker), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(cache_lookup(frontend), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(release(worker), grpc::StatusCode::PERMISSION_DENIED);
  // The roles that may: past the check (to the service's own answer).
  EXPECT_EQ(heartbeat_d1(worker), grpc::StatusCode::OK);
  EXPECT_EQ(cache_lookup(worker), grpc::StatusCode::INVALID_ARGUMENT);  // no namespace key
  EXPECT_EQ(release(frontend), grpc::StatusCode::OK);
  // A worker names only its own engines as where the cache node replies.
  v1::ListNodesRequest lr;
  lr.set_role(v1::NODE_ROLE_DECODE);
  v1::ListNodesResponse nodes;
  grpc::ClientContext lctx;
  ASSERT_TRUE(coordinator_stub_->ListNodes(&lctx, lr, &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  ASSERT_GE(nodes.nodes(0).client_ucx_addresses_size(), 1);
  const std::string d1_engine = nodes.nodes(0).client_ucx_addresses(0);
  auto get_as = [&](const TlsFiles& tls, const std::string& reply) {
    auto stub = v1::CacheNode::NewStub(channel(cache_address_, tls));
    return call([&](grpc::ClientContext* ctx) {
      v1::CacheGetRequest req;
      req.set_reply_address(reply);
      v1::CacheGetResponse resp;
      return stub->Get(ctx, req, &resp);
    });
  };
  EXPECT_EQ(get_as(other_worker, d1_engine), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(get_as(worker, d1_engine), grpc::StatusCode::INVALID_ARGUMENT);  // its own: past it
  // And the cluster serves a turn.
  EXPECT_TRUE(Generate("s1", kTurn1).status.ok());
}

// Every method of every internal service — found from the services' descriptors, so a method added
// later is tried too — refuses a certificate whose role no method is for (PERMISSION_DENIED) and
// one without a Glimpse identity (UNAUTHENTICATED), before it reads the request.
TEST_F(ClusterTest, EveryInternalRpcRefusesACallerWithoutAnAllowedRole) {
  std::unique_ptr<ServiceProcess> prefill = StartPrefillWorker("p1");
  ASSERT_NE(prefill, nullptr);
  CertificateSpec anonymous;
  anonymous.name = "anonymous";
  ASSERT_TRUE(MakeCertificates((dir_ / "tls").string(), {anonymous}, 1).ok());
  const TlsFiles intruder = Certificate("intruder", "x1");
  const TlsFiles no_identity = CertificateFiles((dir_ / "tls").string(), "anonymous");
  // Each service's descriptor through a message of its file: a file nothing in this binary
  // references otherwise is not linked in, and the generated pool would not know it.
  const std::pair<const google::protobuf::FileDescriptor*, std::string> services[] = {
      {v1::RegisterNodeRequest::descriptor()->file(), coordinator_->grpc_address()},
      {v1::CacheGetRequest::descriptor()->file(), cache_address_},
      {v1::DecodeTurnRequest::descriptor()->file(), decode_->grpc_address()},
      {v1::PrefillRequest::descriptor()->file(), prefill->grpc_address()}};
  int methods = 0;
  for (const auto& [file, address] : services) {
    ASSERT_EQ(file->service_count(), 1) << file->name();
    const google::protobuf::ServiceDescriptor* service = file->service(0);
    const std::string& name = service->full_name();
    for (const auto& [tls, want] : {std::pair{intruder, grpc::StatusCode::PERMISSION_DENIED},
                                    std::pair{no_identity, grpc::StatusCode::UNAUTHENTICATED}}) {
      grpc::GenericStub stub(*ClientChannel(address, tls));
      for (int m = 0; m < service->method_count(); ++m) {
        const std::string method = absl::StrCat("/", name, "/", service->method(m)->name());
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        grpc::Slice empty("");  // zero bytes: a valid encoding of any message
        grpc::ByteBuffer request(&empty, 1), response;
        std::promise<grpc::Status> done;
        stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                       [&done](grpc::Status st) { done.set_value(std::move(st)); });
        const grpc::Status st = done.get_future().get();
        EXPECT_EQ(st.error_code(), want) << method << ": " << st.error_message();
        ++methods;
      }
    }
  }
  EXPECT_GE(methods, 2 * 20);
}

// The served tokens against NVIDIA kvpress (tests/fixtures/kvpress/e2e_snapkv_cr0.5.json, see
// tests/kvpress_e2e_test.cc): the workers run SnapKV as kvpress's SnapKVPress(window_size=32,
// kernel_size=5) does, through an eviction profile (W = 32, k = 5, avg, no sinks: kvpress protects
// only the window), and each request's ratio makes the workers keep kvpress's int(T · 0.5)
// entries per head (their budget is ceil(ratio · T)). Every greedy token the cluster streams must
// be kvpress's, when the decode worker prefills the turn itself and when a prefill worker evicts
// it, encodes the kept KV as fp16 pages and ships them over UCX (none of these answers ends early
// or meets a near-tie: kvpress_e2e_test.cc shows all 16 tokens equal through fp16 pages).
class KvpressClusterTest : public ClusterTest {
 protected:
  void SetUp() override {
    profile_ = fs::temp_directory_path() /
               ("glimpse_kvpress_profile_" + std::to_string(::getpid()) + ".eviction.json");
    // The default model's fingerprint (Model::fingerprint()); workers refuse another model's.
    std::ofstream(profile_) << R"({"format": "glimpse-eviction-profile/1",
               "model_fingerprint": "17f1ae519c28bd6a26fafb69beb2478e",
               "methods": {"snapkv": {"scorer": "snapkv", "window": 32, "kernel": 5,
                                      "pooling": "avg", "sinks": 0}}})";
    worker_args_ = {"--eviction_profile=" + profile_.string()};
    ClusterTest::SetUp();
  }
  void TearDown() override {
    ClusterTest::TearDown();
    fs::remove(profile_);
  }

  static nlohmann::json Fixture(const std::string& name) {
    std::ifstream in(std::string(GLIMPSE_SOURCE_DIR) + "/tests/fixtures/kvpress/" + name);
    return nlohmann::json::parse(in);
  }
  // The ids of prompt `name` in prompts.json ({} when absent).
  static std::vector<int32_t> PromptTokens(const nlohmann::json& prompts,
                                           const nlohmann::json& name) {
    for (const nlohmann::json& p : prompts["prompts"]) {
      if (p["name"] == name) return p["tokens"].get<std::vector<int32_t>>();
    }
    return {};
  }
  // Runs `serve(shipped)` with the decode worker alone, then with a prefill worker started.
  void AloneThenShipped(const std::function<void(bool shipped)>& serve) {
    serve(false);
    std::unique_ptr<ServiceProcess> prefill = StartPrefillWorker("p1");
    ASSERT_NE(prefill, nullptr);
    ASSERT_TRUE(AwaitNodes(1, v1::NODE_ROLE_PREFILL));
    serve(true);
  }
  // kvpress's greedy tokens of a fixture case.
  static std::vector<int32_t> GreedyTokens(const nlohmann::json& c) {
    std::vector<int32_t> tokens;
    for (const nlohmann::json& step : c["greedy"]) tokens.push_back(step["token"]);
    return tokens;
  }

  // The greedy token ids of one turn of `tokens` under SnapKV keeping `n_kept` of the context.
  std::vector<int32_t> Serve(const std::string& session, const std::vector<int32_t>& tokens,
                             int64_t n_kept, v1::StateSource* source) {
    v1::EvictionPolicy policy;
    policy.set_method("snapkv");
    policy.set_budget_ratio((static_cast<double>(n_kept) - 0.5) /
                            static_cast<double>(tokens.size() - 1));
    policy.set_codec("fp16");
    return Serve(session, tokens, policy, 16, source);
  }

  std::vector<int32_t> Serve(const std::string& session, const std::vector<int32_t>& tokens,
                             const v1::EvictionPolicy& policy, int32_t max_tokens,
                             v1::StateSource* source, v1::TurnDone* done = nullptr) {
    v1::GenerateRequest req;
    req.set_session_id(session);
    for (int32_t t : tokens) req.mutable_tokens()->add_ids(t);
    *req.mutable_policy() = policy;
    req.mutable_sampling()->set_max_tokens(max_tokens);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    auto reader = stub_->Generate(&ctx, req);
    std::vector<int32_t> ids;
    v1::GenerateEvent e;
    while (reader->Read(&e)) {
      if (e.has_started()) *source = e.started().source();
      if (e.has_done() && done != nullptr) *done = e.done();
      for (int32_t id : e.tokens().token_ids()) ids.push_back(id);
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return ids;
  }

  fs::path profile_;
};

TEST_F(KvpressClusterTest, ServedGreedyTokensEqualKvpressAfterEvictionAndShipping) {
  const nlohmann::json prompts = Fixture("prompts.json");
  const nlohmann::json fixture = Fixture("e2e_snapkv_cr0.5.json");
  AloneThenShipped([&](bool shipped) {
    for (const nlohmann::json& c : fixture["cases"]) {
      const std::vector<int32_t> tokens = PromptTokens(prompts, c["prompt"]);
      ASSERT_FALSE(tokens.empty());
      v1::StateSource source = v1::STATE_SOURCE_UNSPECIFIED;
      const std::string session = c["prompt"].get<std::string>() + (shipped ? "-p" : "-d");
      const std::vector<int32_t> served =
          Serve(session, tokens, c["layers"][0]["n_kept"][0].get<int64_t>(), &source);
      EXPECT_EQ(source, shipped ? v1::STATE_SOURCE_PREFILL_WORKER : v1::STATE_SOURCE_RECOMPUTE);
      EXPECT_EQ(served, GreedyTokens(c)) << session;
    }
  });
}

// Decode-time eviction as served (decode worker alone, then behind a prefill worker): the 64
// greedy tokens of kvpress's DecodingPress(StreamingLLMPress) cutting each head to 128 entries
// every 16 generated tokens (tests/kvpress_decode_test.cc checks the same in process).
TEST_F(KvpressClusterTest, ServedTokensUnderDecodeTimeEvictionEqualKvpress) {
  const nlohmann::json prompts = Fixture("prompts.json");
  const nlohmann::json fixture = Fixture("decode_streamingllm_i16_t128.json");
  v1::EvictionPolicy policy;
  policy.set_method("streamingllm");
  policy.set_budget_ratio(1.0);  // the prompt whole: kvpress evicts only while decoding
  policy.set_codec("fp16");
  policy.set_decode_budget_tokens(fixture["target"].get<int32_t>());
  policy.set_decode_interval(fixture["interval"].get<int32_t>());
  AloneThenShipped([&](bool shipped) {
    for (const nlohmann::json& c : fixture["cases"]) {
      const std::vector<int32_t> tokens = PromptTokens(prompts, c["prompt"]);
      ASSERT_FALSE(tokens.empty());
      const std::vector<int32_t> expected = GreedyTokens(c);
      v1::StateSource source = v1::STATE_SOURCE_UNSPECIFIED;
      v1::TurnDone done;
      const std::string session = c["prompt"].get<std::string>() + (shipped ? "-dp" : "-dd");
      const std::vector<int32_t> served =
          Serve(session, tokens, policy, static_cast<int32_t>(expected.size()), &source, &done);
      EXPECT_EQ(served, expected) << session;
      EXPECT_GT(done.decode_evicted_entries(), 0) << session;
      // 30 layers × 3 kv-heads, each cut to 128 and grown by the 15 tokens fed since.
      EXPECT_EQ(done.kv_entries(), 90 * c["final_entries"].get<int64_t>()) << session;
    }
  });
}

}  // namespace
}  // namespace glimpse

// Crash safety of glimpse-cache-node, the real binary over real UCX (shm + tcp on loopback):
//   1. Several clients put states continuously; the node is SIGKILLed mid-stream and restarted on
//      the same directory. Every acknowledged state must be readable with valid checksums, and no
//      state may be half visible: every stored manifest has all its pages, each valid (checked
//      through the node and, after a clean stop, offline with PageStore).
//   2. The RocksDB directory on a full disk (an 8 MiB tmpfs): puts fail with a clear error
//      (RESOURCE_EXHAUSTED or UNAVAILABLE naming the cause), the node restarts, nothing
//      acknowledged is lost or corrupt. Needs mount(2) (root or CAP_SYS_ADMIN); skipped otherwise,
//      with the reason.
#include <sys/mount.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cache-node/page_store.h"
#include "core/cache_client/cache_client.h"
#include "core/common/http_server.h"
#include "core/common/service_process.h"
#include "core/kvstate/test_state.h"
#include "core/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

using cache_client::CacheClient;
using kvstate::testing::MakeTestState;
using kvstate::testing::TestModel;
using kvstate::testing::TestNamespace;
using kvstate::testing::TestState;

constexpr char kNode[] = GLIMPSE_CACHE_NODE_BINARY;

kvstate::testing::TestStateShape Shape() {
  kvstate::testing::TestStateShape s;  // 8 pages of 64 tokens × head_dim 64 fp16: ~16.6 KB each
  s.tokens_per_page = 64;
  s.head_dim = 64;
  return s;
}

TestState StateFor(uint64_t seed) {
  auto s = MakeTestState(TestNamespace(), TestModel(), Shape(), seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

class CacheNodeCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "posix,sysv,cma,tcp,self", 1);
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("cache_node_crash_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    log_ = (dir_ / "node.log").string();
  }
  void TearDown() override {
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
    if (HasFailure()) std::cerr << "node log tail:\n" << Tail(log_) << "\n";
    std::filesystem::remove_all(dir_);
  }

  absl::StatusOr<ServiceProcess> StartNode(const std::string& db,
                                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--storage.path=" + db, "--warm.bytes=4MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    return ServiceProcess::Start(kNode, args, log_);
  }

  static std::unique_ptr<CacheClient> Client(const ServiceProcess& node) {
    auto t = transport::CreateUcxTransport();
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    std::vector<std::unique_ptr<transport::Transport>> transports;
    transports.push_back(*std::move(t));
    auto c =
        CacheClient::Create({{node.grpc_address()}, {}, absl::Seconds(5)}, std::move(transports));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Get `s` through the node and check every byte and every page (full decode).
  static void ExpectReadable(CacheClient& c, const TestState& s) {
    auto got = c.Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->manifest.SameContent(s.manifest));
    ASSERT_EQ(got->pages.size(), s.pages.size());
    for (size_t i = 0; i < s.pages.size(); ++i) {
      ASSERT_TRUE(std::equal(got->pages[i].begin(), got->pages[i].end(), s.pages[i].begin(),
                             s.pages[i].end()));
      ASSERT_TRUE(
          kvstate::CheckPage(got->manifest, got->manifest.pages[i], got->pages[i], true).ok());
    }
  }

  // Offline, with the node stopped: every manifest's pages are present and valid. Returns the
  // number of stored states.
  static size_t CheckStoreOffline(const std::string& db) {
    PageStoreOptions o;
    o.path = db;
    auto store = PageStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return 0;
    std::vector<kvstate::Manifest> all;
    EXPECT_TRUE((*store)->ForEachManifest([&](kvstate::Manifest m) { all.push_back(m); }).ok());
    for (const kvstate::Manifest& m : all) {
      auto read = (*store)->Read(m.state_key);
      EXPECT_TRUE(read.ok()) << read.status();  // DataLoss if a page were missing
      if (!read.ok()) continue;
      for (size_t i = 0; i < read->bytes.size(); ++i) {
        const auto& b = read->bytes[i];
        absl::Status s = kvstate::CheckPage(
            m, m.pages[i], {reinterpret_cast<const uint8_t*>(b.data()), b.size()}, true);
        EXPECT_TRUE(s.ok()) << s;
      }
    }
    return all.size();
  }

  std::filesystem::path dir_;
  std::string log_;
  std::string mount_point_;
  bool mounted_ = false;
};

TEST_F(CacheNodeCrashTest, SigkillMidStreamLosesNoAcknowledgedState) {
  const std::string db = (dir_ / "db").string();
  // A 1 MiB memtable: flushes to SST and blob files happen mid-stream too, not only WAL appends.
  auto node = StartNode(db, {"--storage.write_buffer=1MiB"});
  ASSERT_TRUE(node.ok()) << node.status();
  constexpr int kClients = 4;
  constexpr size_t kAckedBeforeKill = 100;
  std::mutex mu;
  std::vector<uint64_t> acked, attempted;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      std::unique_ptr<CacheClient> c = Client(*node);
      if (!c) return;
      for (uint64_t i = 1; !stop.load() && i < 100000; ++i) {
        const uint64_t seed = t * 100000 + i;
        const TestState s = StateFor(seed);
        {
          std::lock_guard<std::mutex> lock(mu);
          attempted.push_back(seed);
        }
        absl::StatusOr<cache_client::PutResult> r = c->Put(s.manifest, s.tokens, s.spans());
        if (!r.ok()) break;  // the node is gone
        std::lock_guard<std::mutex> lock(mu);
        acked.push_back(seed);
      }
    });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() >= kAckedBeforeKill || absl::Now() > give_up) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  node->Kill();  // SIGKILL, puts in flight
  stop.store(true);
  for (std::thread& t : clients) t.join();
  ASSERT_GE(acked.size(), kAckedBeforeKill) << "clients never reached the kill point";
  std::cerr << "acknowledged " << acked.size() << " states of " << attempted.size()
            << " attempted before SIGKILL\n";

  auto restarted = StartNode(db);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  std::unique_ptr<CacheClient> c = Client(*restarted);
  ASSERT_NE(c, nullptr);
  for (uint64_t seed : acked) {
    SCOPED_TRACE(absl::StrCat("acknowledged state seed ", seed));
    ExpectReadable(*c, StateFor(seed));
  }
  // Unacknowledged puts: stored completely or not at all.
  size_t found = acked.size();
  for (uint64_t seed : attempted) {
    if (std::find(acked.begin(), acked.end(), seed) != acked.end()) continue;
    const TestState s = StateFor(seed);
    auto got = c->Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model);
    if (got.ok()) {
      ExpectReadable(*c, s);
      ++found;
    } else {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
    }
  }
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->states(), found);
  auto metrics = HttpGet("127.0.0.1", restarted->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(absl::StrContains(*metrics, absl::StrCat("glimpse_cache_node_states ", found)))
      << *metrics;
  EXPECT_TRUE(absl::StrContains(*metrics, "glimpse_cache_node_gets_total"));
  EXPECT_TRUE(absl::StrContains(*metrics, "glimpse_cache_node_rocksdb_wal_bytes"));
  c.reset();
  auto rc = restarted->Terminate();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 0);
  EXPECT_EQ(CheckStoreOffline(db), found);
}

TEST_F(CacheNodeCrashTest, FullDiskGivesAClearErrorAndNoCorruption) {
  mount_point_ = (dir_ / "tmpfs").string();
  std::filesystem::create_directories(mount_point_);
  if (mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount an 8 MiB tmpfs at " << mount_point_ << ": " << strerror(errno)
                 << " (needs root or CAP_SYS_ADMIN)";
  }
  mounted_ = true;
  const std::string db = mount_point_ + "/db";
  // This run takes its settings from a YAML file (--config), as a deployment would.
  const std::string yaml = (dir_ / "node.yaml").string();
  std::ofstream(yaml) << "storage:\n  path: " << db
                      << "\n  write_buffer: 1MiB\nwarm:\n  bytes: 4MiB\n";
  auto node = ServiceProcess::Start(kNode, {"--config", yaml}, log_);
  ASSERT_TRUE(node.ok()) << node.status();
  std::unique_ptr<CacheClient> c = Client(*node);
  ASSERT_NE(c, nullptr);
  std::vector<uint64_t> acked;
  absl::Status error;
  for (uint64_t seed = 1; seed < 200 && error.ok(); ++seed) {  // 200 × 133 KB ≫ 8 MiB
    const TestState s = StateFor(seed);
    absl::StatusOr<cache_client::PutResult> r = c->Put(s.manifest, s.tokens, s.spans());
    if (r.ok()) {
      acked.push_back(seed);
    } else {
      error = r.status();
    }
  }
  std::cerr << "disk full after " << acked.size() << " puts: " << error << "\n";
  ASSERT_FALSE(error.ok()) << "an 8 MiB tmpfs never filled";
  EXPECT_TRUE(error.code() == absl::StatusCode::kResourceExhausted ||
              error.code() == absl::StatusCode::kUnavailable)
      << error;
  EXPECT_TRUE(absl::StrContains(error.message(), "disk full") ||
              absl::StrContains(error.message(), "space"))
      << error;
  // Further puts keep failing clearly (no hang, no OK without storage).
  const TestState extra = StateFor(100000);
  absl::Status again = c->Put(extra.manifest, extra.tokens, extra.spans()).status();
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.code(), absl::StatusCode::kDeadlineExceeded) << again;
  auto metrics = HttpGet("127.0.0.1", node->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(absl::StrContains(*metrics, "glimpse_cache_node_errors_total{method=\"CommitPut\""))
      << *metrics;
  c.reset();
  node->Kill();

  // Restart on the still-full disk; if RocksDB cannot even open there, the start fails with a
  // clear message and we give the tmpfs room, as an operator would.
  auto restarted = StartNode(db);
  if (!restarted.ok()) {
    const std::string msg(restarted.status().message());
    std::cerr << "restart on the full disk failed (a possible outcome): " << msg.substr(0, 120)
              << " ... " << msg.substr(msg.size() > 500 ? msg.size() - 500 : 0) << "\n";
    ASSERT_EQ(mount("tmpfs", mount_point_.c_str(), "tmpfs", MS_REMOUNT, "size=16m"), 0)
        << strerror(errno);
    restarted = StartNode(db);
  }
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  c = Client(*restarted);
  ASSERT_NE(c, nullptr);
  for (uint64_t seed : acked) {
    SCOPED_TRACE(absl::StrCat("acknowledged state seed ", seed));
    ExpectReadable(*c, StateFor(seed));
  }
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->states(), acked.size());
  EXPECT_LE(stats->states(), acked.size() + 1);  // the failed put may have landed, whole
  c.reset();
  auto rc = restarted->Terminate();
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(CheckStoreOffline(db), stats->states());
}

// --help and a bad configuration, through RunServiceMain.
TEST(CacheNodeBinaryTest, HelpAndMissingStoragePath) {
  const auto run = [](const std::string& args, std::string* out) {
    FILE* p = popen((std::string(kNode) + " " + args + " 2>&1").c_str(), "r");
    char buf[4096];
    while (p != nullptr && fgets(buf, sizeof(buf), p) != nullptr) *out += buf;
    const int status = p == nullptr ? -1 : pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string help, bad;
  EXPECT_EQ(run("--help", &help), 0);
  for (const char* key : {"--storage.path", "--storage.sync_every_put", "--warm.bytes",
                          "--retention.max_bytes", "--metrics_listen"}) {
    EXPECT_TRUE(absl::StrContains(help, key)) << key << " missing from:\n" << help;
  }
  EXPECT_EQ(run("--warm.bytes=1GiB", &bad), 2);
  EXPECT_TRUE(absl::StrContains(bad, "storage.path")) << bad;
}

}  // namespace
}  // namespace glimpse::cache_node

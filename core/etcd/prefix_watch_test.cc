// PrefixWatch and Announcement against a real etcd member: what a watcher sees of keys put,
// deleted, expired and revoked, across a partition (TcpProxy) and a restart of etcd.
#include "core/etcd/prefix_watch.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/tcp_proxy.h"
#include "core/common/wait_for.h"
#include "core/etcd/announcement.h"
#include "core/etcd/etcd_process.h"
#include "gtest/gtest.h"

namespace glimpse::etcd {
namespace {

constexpr char kPrefix[] = "/test/members/";
// Generous: what the tests wait for happens within a ttl or a retry, but the machine may be
// loaded.
constexpr absl::Duration kPatience = absl::Seconds(30);

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout = kPatience) {
  return glimpse::WaitFor(pred, timeout);
}

// What a watch has handed over last, and every set it handed over.
class Seen {
 public:
  PrefixWatch::OnChange Recorder() {
    return [this](const KeyValues& kv) {
      absl::MutexLock lock(&mu_);
      last_ = kv;
      history_.push_back(kv);
    };
  }
  KeyValues last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  std::vector<KeyValues> history() {
    absl::MutexLock lock(&mu_);
    return history_;
  }

 private:
  absl::Mutex mu_;
  KeyValues last_ ABSL_GUARDED_BY(mu_);
  std::vector<KeyValues> history_ ABSL_GUARDED_BY(mu_);
};

class PrefixWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = absl::StrCat(
        ::testing::TempDir(), "prefix-watch-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", getpid());
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start(dir);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    client_ = Client(etcd_->endpoint());
  }
  static std::unique_ptr<EtcdClient> Client(const std::string& endpoint) {
    EtcdOptions o;
    o.endpoints = {endpoint};
    o.timeout = absl::Seconds(1);
    return EtcdClient::Create(o).value();
  }
  std::unique_ptr<PrefixWatch> Watch(EtcdClient* client, Seen& seen) {
    return PrefixWatch::Start(client, kPrefix, seen.Recorder(), absl::Milliseconds(100)).value();
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST(PrefixWatchStartTest, RefusesAnEmptyPrefixOrRetry) {
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:1"};
  std::unique_ptr<EtcdClient> c = EtcdClient::Create(o).value();
  EXPECT_FALSE(PrefixWatch::Start(c.get(), "", [](const KeyValues&) {}).ok());
  EXPECT_FALSE(PrefixWatch::Start(
                   c.get(), "/p/", [](const KeyValues&) {}, absl::ZeroDuration())
                   .ok());
  EXPECT_FALSE(Announcement::Start(c.get(), "", "v", absl::Seconds(1)).ok());
  EXPECT_FALSE(Announcement::Start(c.get(), "/k", "v", absl::Milliseconds(500)).ok());
}

TEST_F(PrefixWatchTest, FollowsPutsDeletesAndExpiredLeasesUnderItsPrefixOnly) {
  ASSERT_TRUE(client_->Put(absl::StrCat(kPrefix, "a"), "1").ok());
  Seen seen;
  std::unique_ptr<PrefixWatch> watch = Watch(client_.get(), seen);
  const std::string a = absl::StrCat(kPrefix, "a"), b = absl::StrCat(kPrefix, "b");
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{a, "1"}}; }));
  ASSERT_TRUE(client_->Put(b, "2").ok());
  ASSERT_TRUE(client_->Put("/test/other", "x").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == (KeyValues{{a, "1"}, {b, "2"}}); }));
  ASSERT_TRUE(client_->Put(a, "1b").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == (KeyValues{{a, "1b"}, {b, "2"}}); }));
  ASSERT_TRUE(client_->Delete(b).ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{a, "1b"}}; }));
  // A holder that stops renewing: etcd deletes its key one ttl later, and the watch sees it.
  absl::StatusOr<EtcdClient::Lease> lease = client_->GrantLease(absl::Seconds(1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put(b, "dies", lease->id).ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last().size() == 2; }));
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{a, "1b"}}; }));
  for (const KeyValues& kv : seen.history()) {
    for (const auto& [key, value] : kv) EXPECT_EQ(key.rfind(kPrefix, 0), 0u) << key;
  }
  EXPECT_EQ(watch->reads(), 1);  // one read, every change since from the watch
}

// etcd closes a connection pinged more often than its --grpc-keepalive-min-time (5 s): an idle
// watch must outlast the client's keepalive pings (with 2 s pings it was reopened within 6 s; data
// on the stream resets etcd's count, so the watch stays idle here).
TEST_F(PrefixWatchTest, AnIdleWatchOutlastsTheKeepalivePings) {
  Seen seen;
  std::unique_ptr<PrefixWatch> watch = Watch(client_.get(), seen);
  ASSERT_TRUE(WaitFor([&] { return watch->reads() == 1; }));
  absl::SleepFor(absl::Seconds(16));  // the property is the duration itself
  const std::string a = absl::StrCat(kPrefix, "a");
  ASSERT_TRUE(client_->Put(a, "1").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{a, "1"}}; }));
  EXPECT_EQ(watch->reads(), 1);
}

TEST_F(PrefixWatchTest, CatchesUpAfterAPartitionAndAnEtcdRestart) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(etcd_->endpoint());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  std::unique_ptr<EtcdClient> cut_off = Client((*proxy)->address());
  Seen seen;
  std::unique_ptr<PrefixWatch> watch = Watch(cut_off.get(), seen);
  const std::string a = absl::StrCat(kPrefix, "a"), b = absl::StrCat(kPrefix, "b");
  ASSERT_TRUE(client_->Put(a, "1").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{a, "1"}}; }));
  // Changes made while the watcher is cut off reach it once it is back.
  (*proxy)->Cut();
  ASSERT_TRUE(client_->Put(b, "2").ok());
  ASSERT_TRUE(client_->Delete(a).ok());
  (*proxy)->Restore();
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{b, "2"}}; }));
  EXPECT_GE(watch->reads(), 2);  // the cut ended the watch; the keys were read again
  // etcd itself restarts: the watch reads again and goes on.
  etcd_->Kill();
  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(client_->Put(a, "3").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.last() == (KeyValues{{a, "3"}, {b, "2"}}); }));
  EXPECT_GE(watch->reads(), 3);
}

TEST_F(PrefixWatchTest, AnAnnouncementLivesWithItsHolderAndComesBackWhenItsLeaseIsLost) {
  Seen seen;
  std::unique_ptr<PrefixWatch> watch = Watch(client_.get(), seen);
  const std::string key = absl::StrCat(kPrefix, "node-1");
  absl::StatusOr<std::unique_ptr<Announcement>> node =
      Announcement::Start(client_.get(), key, "127.0.0.1:7000", absl::Seconds(1));
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{key, "127.0.0.1:7000"}}; }));
  // Renewed: still there three ttls later.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(seen.last(), (KeyValues{{key, "127.0.0.1:7000"}}));
  // Lost (revoked behind its back, as an expiry while etcd could not be reached): put again.
  absl::StatusOr<std::optional<EtcdClient::Versioned>> held = client_->Get(key);
  ASSERT_TRUE(held.ok() && held->has_value());
  ASSERT_TRUE(client_->RevokeLease((*held)->lease).ok());
  ASSERT_TRUE(WaitFor([&] { return (*node)->leases() == 2; }));
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{key, "127.0.0.1:7000"}}; }));
  // Deleted behind its back (an operator, or another holder of the same key that stopped): put
  // again under its own lease.
  const size_t before = seen.history().size();
  ASSERT_TRUE(client_->Delete(key).ok());
  auto gone_then_back = [&] {
    const std::vector<KeyValues> h = seen.history();
    const bool gone = std::any_of(h.begin() + static_cast<ptrdiff_t>(before), h.end(),
                                  [](const KeyValues& kv) { return kv.empty(); });
    return gone && h.back() == KeyValues{{key, "127.0.0.1:7000"}};
  };
  ASSERT_TRUE(WaitFor(gone_then_back));
  EXPECT_EQ((*node)->leases(), 2);  // the same lease: the key was put again, not re-granted
  node->reset();
  ASSERT_TRUE(WaitFor([&] { return seen.last().empty(); }));
  // A holder that stops: its key goes at once (revoked), far sooner than its 60 s ttl.
  const std::string other = absl::StrCat(kPrefix, "node-2");
  absl::StatusOr<std::unique_ptr<Announcement>> long_lived =
      Announcement::Start(client_.get(), other, "127.0.0.1:7001", absl::Seconds(60));
  ASSERT_TRUE(long_lived.ok()) << long_lived.status();
  ASSERT_TRUE(WaitFor([&] { return seen.last() == KeyValues{{other, "127.0.0.1:7001"}}; }));
  long_lived->reset();
  ASSERT_TRUE(WaitFor([&] { return seen.last().empty(); }, absl::Seconds(20)));
}

}  // namespace
}  // namespace glimpse::etcd

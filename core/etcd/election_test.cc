// Election against a real etcd member; a partition is a TcpProxy between a candidate and etcd.
#include "core/etcd/election.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/tcp_proxy.h"
#include "core/common/wait_for.h"
#include "core/etcd/etcd_process.h"
#include "gtest/gtest.h"

namespace glimpse::etcd {
namespace {

constexpr char kKey[] = "/test/leader";
// Generous: what the tests wait for happens within ttl + poll, but the machine may be loaded.
constexpr absl::Duration kPatience = absl::Seconds(30);

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout = kPatience) {
  return glimpse::WaitFor(pred, timeout);
}

class ElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = absl::StrCat(
        ::testing::TempDir(), "election-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", getpid());
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start(dir);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  std::unique_ptr<EtcdClient> Client(const std::string& endpoint) {
    EtcdOptions o;
    o.endpoints = {endpoint};
    o.timeout = absl::Milliseconds(500);
    return EtcdClient::Create(o).value();
  }

  struct Candidate {
    std::unique_ptr<EtcdClient> client;
    std::unique_ptr<Election> election;
    std::atomic<int> elected{0};
    std::atomic<int> deposed{0};
    std::atomic<int64_t> revision{0};
  };

  std::unique_ptr<Candidate> Campaign(const std::string& name, const std::string& endpoint,
                                      absl::Duration ttl = absl::Seconds(2)) {
    auto c = std::make_unique<Candidate>();
    c->client = Client(endpoint);
    Candidate* raw = c.get();
    c->election = Election::Start(
                      c->client.get(), {kKey, name, ttl, absl::Milliseconds(100)},
                      [raw](const Term& t) {
                        raw->revision = t.revision;
                        ++raw->elected;
                        return absl::OkStatus();
                      },
                      [raw](const Term&) { ++raw->deposed; })
                      .value();
    return c;
  }

  static int Leaders(const std::vector<Candidate*>& cs) {
    int n = 0;
    for (Candidate* c : cs) n += c->election->leading() ? 1 : 0;
    return n;
  }

  std::unique_ptr<EtcdProcess> etcd_;
};

TEST(ElectionStartTest, RefusesAMissingKeyOrValueAndATtlUnderASecond) {
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:1"};
  std::unique_ptr<EtcdClient> client = EtcdClient::Create(o).value();
  auto ok = [](const Term&) { return absl::OkStatus(); };
  auto none = [](const Term&) {};
  EXPECT_EQ(Election::Start(client.get(), {"", "a"}, ok, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Election::Start(client.get(), {"/k", ""}, ok, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Election::Start(client.get(), {"/k", "a", absl::Milliseconds(500)}, ok, none).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ElectionTest, OneOfThreeLeadsAndEachResignationHandsOverToAnother) {
  std::vector<std::unique_ptr<Candidate>> owned;
  // A ttl long enough that no term is lost to a loaded machine's slow renewals: hand-overs here
  // are resignations, which do not wait for it.
  for (const char* name : {"a", "b", "c"}) {
    owned.push_back(Campaign(name, etcd_->endpoint(), absl::Seconds(5)));
  }
  std::vector<Candidate*> live = {owned[0].get(), owned[1].get(), owned[2].get()};
  std::vector<int64_t> revisions;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(WaitFor([&] { return Leaders(live) == 1; })) << "round " << round;
    Candidate* leader = nullptr;
    for (Candidate* c : live) {
      if (c->election->leading()) leader = c;
    }
    const std::string name = leader->election->leader();
    EXPECT_FALSE(name.empty());
    // Every follower learns who leads.
    for (Candidate* c : live) {
      EXPECT_TRUE(WaitFor([&] { return c->election->leader() == name; })) << c->election->leader();
    }
    revisions.push_back(leader->revision);
    leader->election->Stop();       // resigns: the key goes at once
    EXPECT_EQ(leader->deposed, 0);  // a resignation is not a deposition
    std::erase(live, leader);
  }
  // Each term's guard is distinct, and later terms' are higher.
  EXPECT_LT(revisions[0], revisions[1]);
  EXPECT_LT(revisions[1], revisions[2]);
}

TEST_F(ElectionTest, APartitionedLeaderStepsDownBeforeItsSuccessorLeadsAndItsWritesAreFenced) {
  std::unique_ptr<TcpProxy> link = TcpProxy::Start(etcd_->endpoint()).value();
  std::unique_ptr<Candidate> a = Campaign("a", link->address());
  ASSERT_TRUE(WaitFor([&] { return a->election->leading(); }));
  std::unique_ptr<Candidate> b = Campaign("b", etcd_->endpoint());
  ASSERT_TRUE(WaitFor([&] { return b->election->leader() == "a"; }));
  const EtcdClient::Guard a_guard{kKey, a->revision};
  ASSERT_TRUE(b->client->Apply({{"/test/data", "from a"}}, a_guard).ok());

  // a can no longer reach etcd: it stops leading, b takes over, and never both at once.
  link->Cut();
  bool both = false;
  const absl::Time end = absl::Now() + kPatience;
  while (!b->election->leading() && absl::Now() < end) {
    // b first: were a seen leading after b, a would have led while b did.
    const bool b_leads = b->election->leading();
    both = both || (b_leads && a->election->leading());
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(b->election->leading());
  EXPECT_FALSE(both);
  EXPECT_FALSE(a->election->leading());
  EXPECT_TRUE(WaitFor([&] { return a->deposed == 1; }));
  EXPECT_EQ(b->election->leader(), "b");
  // A write guarded by a's term fails now, even through a client that reaches etcd.
  EXPECT_EQ(b->client->Apply({{"/test/data", "late from a"}}, a_guard).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->client->Get("/test/data").value()->value, "from a");
  EXPECT_TRUE(
      b->client->Apply({{"/test/data", "from b"}}, EtcdClient::Guard{kKey, b->revision}).ok());

  // Back in touch, a follows b.
  link->Restore();
  EXPECT_TRUE(WaitFor([&] { return a->election->leader() == "b"; }));
  EXPECT_FALSE(a->election->leading());
  EXPECT_EQ(a->elected, 1);
}

TEST_F(ElectionTest, AKilledLeadersLeaseExpiresAndAFollowerLeadsWithinTheTtl) {
  std::unique_ptr<TcpProxy> link = TcpProxy::Start(etcd_->endpoint()).value();
  std::unique_ptr<Candidate> a = Campaign("a", link->address());
  ASSERT_TRUE(WaitFor([&] { return a->election->leading(); }));
  std::unique_ptr<Candidate> b = Campaign("b", etcd_->endpoint());
  ASSERT_TRUE(WaitFor([&] { return b->election->leader() == "a"; }));
  // Cut and stopped: as a machine that died, a resigns nothing.
  link->Cut();
  a->election->Stop();
  const absl::Time died = absl::Now();
  ASSERT_TRUE(WaitFor([&] { return b->election->leading(); }));
  // Within the ttl (2 s) and a poll, where the machine is not too loaded to tell.
  RecordProperty("takeover_ms", absl::ToInt64Milliseconds(absl::Now() - died));
}

TEST_F(ElectionTest, ATermThatCannotBeTakenUpIsResignedAndWonAgainLater) {
  std::unique_ptr<EtcdClient> client = Client(etcd_->endpoint());
  std::atomic<int> attempts{0};
  std::unique_ptr<Election> e =
      Election::Start(
          client.get(), {kKey, "a", absl::Seconds(5), absl::Milliseconds(50)},
          [&](const Term&) {
            return ++attempts < 3 ? absl::UnavailableError("state not loadable yet")
                                  : absl::OkStatus();
          },
          [](const Term&) {})
          .value();
  ASSERT_TRUE(WaitFor([&] { return e->leading(); }));
  EXPECT_EQ(attempts, 3);
  EXPECT_EQ(e->terms(), 1);
}

TEST_F(ElectionTest, LeaseCallsKeepAndRevokeTheKeysAttachedToThem) {
  std::unique_ptr<EtcdClient> c = Client(etcd_->endpoint());
  EtcdClient::Lease lease = c->GrantLease(absl::Seconds(5)).value();
  EXPECT_GE(lease.ttl, absl::Seconds(5));
  EtcdClient::Versioned put = c->PutIfAbsent("/l/k", "mine", lease.id).value();
  EXPECT_EQ(put.lease, lease.id);
  EXPECT_GT(put.create_revision, 0);
  // A second put finds the first.
  EtcdClient::Versioned again = c->PutIfAbsent("/l/k", "theirs", 0).value();
  EXPECT_EQ(again.value, "mine");
  EXPECT_EQ(again.create_revision, put.create_revision);
  EXPECT_GT(c->KeepAlive(lease.id).value(), absl::Seconds(3));
  ASSERT_TRUE(c->RevokeLease(lease.id).ok());
  EXPECT_FALSE(c->Get("/l/k").value().has_value());
  EXPECT_EQ(c->KeepAlive(lease.id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(c->RevokeLease(lease.id).ok());  // already gone
}

}  // namespace
}  // namespace glimpse::etcd

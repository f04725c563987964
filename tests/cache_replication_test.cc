// Replicated cache nodes (core/cache_client/cache_client.h): three real glimpse-cache-node
// processes, a client with R = 2 over all three (UCX over TCP on loopback, which detects a peer's
// death). Every state put is on exactly two nodes; SIGKILL one node and every acknowledged state
// is still readable, byte for byte, and puts go on, each still on two (live) nodes; the node,
// restarted on its directory, serves its states again; the longest stored prefix is found across
// nodes, pins and deletes reach every copy; a put that reaches fewer than W nodes fails, saying so.
// With the nodes' replicators on: a node's death is repaired to two copies per state on the
// survivors, and its return rebalances every state onto exactly its two owners, reads never
// missing meanwhile. With membership on etcd (core/cluster/etcd_membership.h, no coordinator, no
// node lists): a killed node leaves every client's list by itself and is repaired around; a
// fourth node started under load is seen, takes the states it now owns, and no read misses.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cache_client/cache_client.h"
#include "core/cache_client/placement.h"
#include "core/cluster/etcd_membership.h"
#include "core/common/http_server.h"
#include "core/common/service_process.h"
#include "core/common/wait_for.h"
#include "core/etcd/etcd_process.h"
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
constexpr int kNodes = 3;  // started by SetUp; one more port is kept for a node that joins

TestState StateFor(uint64_t seed) {
  kvstate::testing::TestStateShape shape;
  shape.tokens_per_page = 32;
  auto s = MakeTestState(TestNamespace(), TestModel(), shape, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

class CacheReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp,self", 1);
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("cache_replication_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    if (membership_) {
      absl::StatusOr<std::unique_ptr<etcd::EtcdProcess>> etcd =
          etcd::EtcdProcess::Start((dir_ / "etcd").string());
      ASSERT_TRUE(etcd.ok()) << etcd.status();
      etcd_ = *std::move(etcd);
    }
    for (int i = 0; i <= kNodes; ++i) {  // every address first: each node is told all of them
      absl::StatusOr<int> port = FreeLoopbackPort();
      ASSERT_TRUE(port.ok()) << port.status();
      ports_.push_back(*port);
    }
    for (int i = 0; i < kNodes; ++i) {
      nodes_.push_back(StartNode(i));
      ASSERT_TRUE(nodes_.back().has_value());
    }
  }
  void TearDown() override {
    if (HasFailure()) {
      for (size_t i = 0; i < nodes_.size(); ++i) {
        std::cerr << "node " << i << ":\n" << Tail(Log(static_cast<int>(i))) << "\n";
      }
    }
    nodes_.clear();
    etcd_.reset();  // before its directory goes
    std::filesystem::remove_all(dir_);
  }

  std::string Log(int i) const { return (dir_ / absl::StrCat("node-", i, ".log")).string(); }
  std::string Address(int i) const { return absl::StrCat("127.0.0.1:", ports_[i]); }

  // On a fixed port, so that a restarted node keeps its address; with `replicate_`, each node
  // keeps its states on their two owners (cache-node/replicator.h), scanning every 200 ms; with
  // `membership_`, the owners among the nodes alive on etcd (no list given).
  std::optional<ServiceProcess> StartNode(int i) {
    std::vector<std::string> args = {absl::StrCat("--listen=", Address(i)),
                                     "--storage.path=" + (dir_ / absl::StrCat("node-", i)).string(),
                                     "--storage.sync_every_put=false", "--warm.bytes=4MiB"};
    if (membership_) {
      args.insert(args.end(),
                  {"--membership.etcd_endpoints=" + etcd_->endpoint(),
                   absl::StrCat("--membership.ttl=", absl::FormatDuration(kTtl)),
                   "--replication.interval=200ms", "--replication.repair_delay=" + repair_delay_});
    } else if (replicate_) {
      args.insert(args.end(), {absl::StrCat("--replication.peers=", Address(0), ",", Address(1),
                                            ",", Address(2)),
                               "--replication.self=" + Address(i), "--replication.interval=200ms"});
    }
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(kNode, args, Log(i));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return std::nullopt;
    return *std::move(p);
  }

  static std::unique_ptr<CacheClient> Client(std::vector<std::string> addresses) {
    std::vector<std::unique_ptr<transport::Transport>> transports;
    transports.push_back(transport::CreateUcxTransport().value());
    cache_client::CacheClientOptions o;
    o.addresses = std::move(addresses);
    o.timeout = absl::Seconds(5);
    o.replicas = 2;
    return CacheClient::Create(o, std::move(transports)).value();
  }
  std::unique_ptr<CacheClient> All() { return Client({Address(0), Address(1), Address(2)}); }

  // How many of the nodes `alive` hold `s`, each asked through a client of its own (made once
  // per node; Forget drops a restarted node's).
  int Copies(const TestState& s, const std::vector<int>& alive) {
    int copies = 0;
    for (int i : alive) {
      std::unique_ptr<CacheClient>& one = single_[i];
      if (one == nullptr) one = Client({Address(i)});
      auto got = one->Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model);
      if (got.ok()) ++copies;
    }
    return copies;
  }
  void Forget(int i) { single_.erase(i); }

  // Puts the states of seeds [first, first + count) through `c`; each must be stored.
  static std::vector<TestState> PutStates(CacheClient& c, uint64_t first, uint64_t count) {
    std::vector<TestState> states;
    for (uint64_t seed = first; seed < first + count; ++seed) {
      states.push_back(StateFor(seed));
      auto put = c.Put(states.back().manifest, states.back().tokens, states.back().spans());
      EXPECT_TRUE(put.ok()) << put.status();
    }
    return states;
  }

  static void ExpectReadable(CacheClient& c, const TestState& s) {
    auto got = c.Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->manifest.SameContent(s.manifest));
    ASSERT_EQ(got->pages.size(), s.pages.size());
    for (size_t i = 0; i < s.pages.size(); ++i) {
      ASSERT_TRUE(std::equal(got->pages[i].begin(), got->pages[i].end(), s.pages[i].begin(),
                             s.pages[i].end()));
    }
  }

  static constexpr absl::Duration kTtl = absl::Seconds(2);  // membership.ttl
  bool replicate_ = false;                                  // set by a test's fixture before SetUp
  bool membership_ = false;                                 // likewise
  std::string repair_delay_ = "0s";  // with membership_: replication.repair_delay
  std::unique_ptr<etcd::EtcdProcess> etcd_;
  std::filesystem::path dir_;
  std::vector<int> ports_;
  std::vector<std::optional<ServiceProcess>> nodes_;
  std::map<int, std::unique_ptr<CacheClient>> single_;
};

TEST_F(CacheReplicationTest, EveryStateIsOnTwoNodesAndOutlivesOneNodesDeath) {
  std::unique_ptr<CacheClient> client = All();
  std::vector<TestState> states = PutStates(*client, 1, 24);
  std::map<int, int> per_node;  // rendezvous spreads the states over the nodes
  for (const TestState& s : states) {
    EXPECT_EQ(Copies(s, {0, 1, 2}), 2);
    for (int i = 0; i < kNodes; ++i) {
      if (Copies(s, {i}) == 1) ++per_node[i];
    }
  }
  for (int i = 0; i < kNodes; ++i) EXPECT_GT(per_node[i], 0) << "node " << i << " holds nothing";

  nodes_[1]->Kill();
  for (const TestState& s : states) ExpectReadable(*client, s);
  // Stores go on while it is down, each on two of the live nodes.
  for (uint64_t seed = 100; seed < 110; ++seed) {
    states.push_back(StateFor(seed));
    auto put = client->Put(states.back().manifest, states.back().tokens, states.back().spans());
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(Copies(states.back(), {0, 2}), 2);
  }

  // Back on its directory: it serves what it held, and nothing is lost or doubled.
  nodes_[1] = StartNode(1);
  ASSERT_TRUE(nodes_[1].has_value());
  Forget(1);
  std::unique_ptr<CacheClient> fresh = All();
  for (const TestState& s : states) {
    ExpectReadable(*fresh, s);
    EXPECT_GE(Copies(s, {0, 1, 2}), 2);
  }
}

// A batched get over several nodes: every state, in order, byte for byte; with a node down too
// (its batch fails, its states come from their other copies).
TEST_F(CacheReplicationTest, GetManyGathersStatesFromEveryNodeAndOutlivesOneNodesDeath) {
  std::unique_ptr<CacheClient> client = All();
  std::vector<TestState> states;
  std::vector<cache_client::GetSpec> specs;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    states.push_back(StateFor(seed));
    const kvstate::Manifest& m = states.back().manifest;
    ASSERT_TRUE(client->Put(m, states.back().tokens, states.back().spans()).ok());
    specs.push_back({.ns = m.namespace_key, .key = m.state_key, .model = m.model, .pages = {}});
  }
  auto expect_all = [&] {
    absl::StatusOr<std::vector<cache_client::State>> got = client->GetMany(specs);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), states.size());
    for (size_t i = 0; i < states.size(); ++i) {
      EXPECT_TRUE((*got)[i].manifest.SameContent(states[i].manifest)) << i;
      ASSERT_EQ((*got)[i].pages.size(), states[i].pages.size());
      for (size_t p = 0; p < states[i].pages.size(); ++p) {
        EXPECT_TRUE(std::equal((*got)[i].pages[p].begin(), (*got)[i].pages[p].end(),
                               states[i].pages[p].begin(), states[i].pages[p].end()));
      }
    }
  };
  expect_all();
  nodes_[0]->Kill();
  expect_all();
  EXPECT_EQ(client->GetMany({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CacheReplicationTest, LookupFindsTheLongestPrefixOnAnyNodeAndDeleteReachesAll) {
  std::unique_ptr<CacheClient> client = All();
  std::vector<TestState> states = PutStates(*client, 1, 6);
  for (const TestState& s : states) {
    auto m = client->Lookup(s.manifest.namespace_key, s.tokens);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(m->found);
    EXPECT_EQ(m->key, s.manifest.state_key);
    EXPECT_EQ(m->token_count, s.tokens.size());
  }
  // Pins and deletes reach every node that holds the state.
  const kvstate::NamespaceKey& ns = states[0].manifest.namespace_key;
  const kvstate::StateKey& key = states[0].manifest.state_key;
  ASSERT_TRUE(client->Pin(ns, key).ok());
  EXPECT_EQ(client->Delete(ns, key).code(), absl::StatusCode::kFailedPrecondition);  // pinned
  ASSERT_TRUE(client->Unpin(ns, key).ok());
  absl::Status deleted = client->Delete(ns, key);
  ASSERT_TRUE(deleted.ok()) << deleted;
  EXPECT_EQ(Copies(states[0], {0, 1, 2}), 0);
  EXPECT_EQ(client
                ->Get(states[0].manifest.namespace_key, states[0].manifest.state_key,
                      states[0].manifest.model)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client->Pin(ns, key).code(), absl::StatusCode::kNotFound);
}

TEST_F(CacheReplicationTest, APutThatCannotReachTwoNodesFailsAndSaysSo) {
  nodes_[0]->Kill();
  nodes_[2]->Kill();
  std::unique_ptr<CacheClient> client = All();
  TestState s = StateFor(7);
  auto put = client->Put(s.manifest, s.tokens, s.spans());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(put.status().message().find("stored 1 of the 2 copies"), std::string::npos)
      << put.status();
  // It is readable from the one copy there is.
  ExpectReadable(*client, s);
  // The same when the dead nodes have left the list (membership on etcd): W stays what the
  // client needed when it listed three, and the put fails rather than keep one copy.
  ASSERT_TRUE(client->SetNodes({Address(1)}).ok());
  TestState t = StateFor(8);
  put = client->Put(t.manifest, t.tokens, t.spans());
  EXPECT_NE(put.status().message().find("stored 1 of the 2 copies"), std::string::npos)
      << put.status();
  // A client that only ever listed one node stores one copy.
  auto one = Client({Address(1)});
  EXPECT_TRUE(one->Put(t.manifest, t.tokens, t.spans()).ok());
}

class CacheRepairTest : public CacheReplicationTest {
 protected:
  CacheRepairTest() { replicate_ = true; }

  // Waits until `done` holds, reading every state through `client` meanwhile (never a miss).
  template <typename Pred>
  void AwaitWhileReading(CacheClient& client, const std::vector<TestState>& states, Pred done) {
    const absl::Time end = absl::Now() + absl::Seconds(90);
    while (!done()) {
      ASSERT_LT(absl::Now(), end) << "replication did not settle";
      for (const TestState& s : states) ExpectReadable(client, s);
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  // Whether every state is on exactly its two owners among `alive`.
  bool AllOnOwners(const std::vector<TestState>& states, const std::vector<int>& alive) {
    return std::all_of(states.begin(), states.end(),
                       [&](const TestState& s) { return OnOwners(s, alive); });
  }
  // Whether `s` is on exactly its two owners among `alive` (the placement's top two).
  bool OnOwners(const TestState& s, std::vector<int> alive) {
    std::vector<std::string> addresses;
    for (int i : alive) addresses.push_back(Address(i));
    const std::vector<size_t> order =
        cache_client::RendezvousOrder(s.manifest.state_key, addresses);
    int on_owners = 0, elsewhere = 0;
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const int copies = Copies(s, {alive[order[rank]]});
      (rank < 2 ? on_owners : elsewhere) += copies;
    }
    return on_owners == 2 && elsewhere == 0;
  }
};

TEST_F(CacheRepairTest, ANodesDeathIsRepairedToTwoCopiesAndItsReturnRebalances) {
  std::unique_ptr<CacheClient> client = All();
  std::vector<TestState> states = PutStates(*client, 1, 16);
  // Repair: node 1 dies; the survivors copy until each state has two copies on them.
  nodes_[1]->Kill();
  AwaitWhileReading(*client, states, [&] { return AllOnOwners(states, {0, 2}); });
  // Rebalance: node 1 is back (with what it held); each state ends on exactly its two owners
  // among the three, and no read misses on the way.
  nodes_[1] = StartNode(1);
  ASSERT_TRUE(nodes_[1].has_value());
  Forget(1);
  AwaitWhileReading(*client, states, [&] { return AllOnOwners(states, {0, 1, 2}); });
}

// A node down while a state it holds is deleted comes back with its old copy: it learns of the
// delete from the other owner's tombstone and deletes its copy too, instead of copying the state
// back; stored again by a client, the state is replicated as any other.
TEST_F(CacheRepairTest, AStateDeletedWhileANodeIsDownStaysDeletedWhenItReturns) {
  std::unique_ptr<CacheClient> client = All();
  std::vector<TestState> states = PutStates(*client, 1, 8);
  auto held_by_1 = std::find_if(states.begin(), states.end(),
                                [&](const TestState& s) { return Copies(s, {1}) == 1; });
  ASSERT_NE(held_by_1, states.end());
  const TestState gone = *held_by_1;
  states.erase(held_by_1);
  nodes_[1]->Kill();
  const absl::Status deleted = client->Delete(gone.manifest.namespace_key, gone.manifest.state_key);
  ASSERT_TRUE(deleted.ok()) << deleted;
  EXPECT_EQ(Copies(gone, {0, 2}), 0);
  nodes_[1] = StartNode(1);
  ASSERT_TRUE(nodes_[1].has_value());
  Forget(1);
  // No node holds it once node 1 has learnt of the delete: nothing is left to copy it back from.
  AwaitWhileReading(*client, states, [&] { return Copies(gone, {0, 1, 2}) == 0; });
  // The client finds it nowhere once its channel to the restarted node has reconnected (until
  // then that node answers UNAVAILABLE).
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::IsNotFound(
            client->Get(gone.manifest.namespace_key, gone.manifest.state_key, gone.manifest.model)
                .status());
      },
      absl::Seconds(60)));
  ASSERT_TRUE(client->Put(gone.manifest, gone.tokens, gone.spans()).ok());
  states.push_back(gone);
  AwaitWhileReading(*client, states, [&] { return OnOwners(gone, {0, 1, 2}); });
}

class CacheMembershipTest : public CacheRepairTest {
 protected:
  CacheMembershipTest() { membership_ = true; }

  // A client with no node list whose nodes are the live ones on etcd, as a worker's.
  struct Follower {
    std::unique_ptr<CacheClient> client;
    std::unique_ptr<cluster::EtcdMembership> membership;  // stops before the client
  };
  Follower Follow() {
    Follower f;
    f.client = Client({});
    cluster::EtcdMembershipOptions o;
    o.etcd_endpoints = {etcd_->endpoint()};
    o.ttl = kTtl;
    f.membership = cluster::EtcdMembership::Start(o, [c = f.client.get()](
                                                         const std::vector<std::string>& live) {
                     EXPECT_TRUE(c->SetNodes(live).ok());
                   }).value();
    return f;
  }
  std::vector<std::string> Addresses(const std::vector<int>& nodes) const {
    std::vector<std::string> out;
    for (int i : nodes) out.push_back(Address(i));
    std::sort(out.begin(), out.end());
    return out;
  }
  // Waits (generously: the machine may be loaded) until the client lists exactly `nodes`.
  static bool Lists(CacheClient& c, std::vector<std::string> nodes) {
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (c.nodes() != nodes && absl::Now() < end) absl::SleepFor(absl::Milliseconds(20));
    return c.nodes() == nodes;
  }
};

TEST_F(CacheMembershipTest, AKilledNodeLeavesTheMembershipByItselfAndIsRepairedAround) {
  Follower f = Follow();
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 1, 2})));
  std::vector<TestState> states = PutStates(*f.client, 1, 16);
  // No coordinator runs: the node's lease ends one ttl after its death and every watcher sees it.
  const absl::Time killed = absl::Now();
  nodes_[1]->Kill();
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 2})));
  std::cerr << "membership saw the death after " << absl::FormatDuration(absl::Now() - killed)
            << " (ttl " << absl::FormatDuration(kTtl) << ")\n";
  AwaitWhileReading(*f.client, states, [&] { return AllOnOwners(states, {0, 2}); });
  // Back on its address: announced again, and the states settle on their owners among three.
  nodes_[1] = StartNode(1);
  ASSERT_TRUE(nodes_[1].has_value());
  Forget(1);
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 1, 2})));
  AwaitWhileReading(*f.client, states, [&] { return AllOnOwners(states, {0, 1, 2}); });
}

TEST_F(CacheMembershipTest, AFourthNodeJoiningUnderLoadTakesItsStatesAndNoReadMisses) {
  Follower f = Follow();
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 1, 2})));
  std::vector<TestState> states = PutStates(*f.client, 1, 16);
  // Load: puts of new states and reads of every state put so far, until the move is over.
  std::atomic<bool> stop = false;
  std::atomic<int> reads = 0;
  std::vector<std::string> failures;  // written by the load thread only, read after its join
  std::vector<TestState> written;     // likewise
  std::thread load([&] {
    for (uint64_t seed = 1000; !stop; ++seed) {
      written.push_back(StateFor(seed));
      const TestState& s = written.back();
      if (auto put = f.client->Put(s.manifest, s.tokens, s.spans()); !put.ok()) {
        failures.push_back("put: " + put.status().ToString());
      }
      const TestState* const reread[] = {&states[seed % states.size()], &s};
      for (const TestState* r : reread) {
        auto got =
            f.client->Get(r->manifest.namespace_key, r->manifest.state_key, r->manifest.model);
        ++reads;
        if (!got.ok() || !got->manifest.SameContent(r->manifest)) {
          failures.push_back("get: " + got.status().ToString());
        }
      }
    }
  });
  // No ASSERT while the load runs: its thread must be joined whatever happens.
  nodes_.push_back(StartNode(3));
  const bool started = nodes_.back().has_value();
  const bool seen = started && Lists(*f.client, Addresses({0, 1, 2, 3}));
  // Every state, the first and those the load wrote meanwhile, ends on exactly its two owners
  // among four; the new node is an owner of some.
  const absl::Time end = absl::Now() + absl::Seconds(90);
  auto settled = [&](const std::vector<TestState>& all) {
    return std::all_of(all.begin(), all.end(), [&](const TestState& s) {
      return OnOwners(s, {0, 1, 2, 3});
    });
  };
  while (seen && !settled(states) && absl::Now() < end) absl::SleepFor(absl::Milliseconds(200));
  stop = true;
  load.join();
  ASSERT_TRUE(started);
  ASSERT_TRUE(seen) << "the client never listed the fourth node";
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed calls of " << reads
                                << " reads, the first: " << failures.front();
  EXPECT_GT(reads, 0);
  states.insert(states.end(), written.begin(), written.end());
  const absl::Time settle_end = absl::Now() + absl::Seconds(90);
  while (!settled(states) && absl::Now() < settle_end) absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(settled(states));
  int on_new = 0;
  for (const TestState& s : states) on_new += Copies(s, {3});
  EXPECT_GT(on_new, 0);
  std::cerr << "during the move: " << written.size() << " puts and " << reads << " reads; "
            << on_new << " of " << states.size() << " states now on the new node\n";
  for (const TestState& s : states) ExpectReadable(*f.client, s);
}

// With replication.repair_delay, a node that restarts within it comes back to its share: the
// others make no stand-in copies while it is gone (without the delay they copy within a scan).
class CacheRepairDelayTest : public CacheMembershipTest {
 protected:
  CacheRepairDelayTest() { repair_delay_ = "60s"; }
  // A counter of node `i`'s /metrics; -1 when unreadable.
  double Counter(int i, const std::string& name) {
    absl::StatusOr<std::string> text = HttpGet("127.0.0.1", nodes_[i]->metrics_port(), "/metrics");
    if (!text.ok()) return -1;
    const size_t at = text->find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::atof(text->c_str() + at + name.size() + 2);
  }
};

TEST_F(CacheRepairDelayTest, ANodeBackWithinTheRepairDelayGetsNoStandInCopies) {
  Follower f = Follow();
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 1, 2})));
  std::vector<TestState> states = PutStates(*f.client, 1, 16);
  // Settled first (a node may copy while its own membership view is still filling at start).
  AwaitWhileReading(*f.client, states, [&] { return AllOnOwners(states, {0, 1, 2}); });
  const std::string copied = "glimpse_cache_node_replication_copied_states_total";
  const double copied0 = Counter(0, copied), copied2 = Counter(2, copied);
  nodes_[1]->Kill();
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 2})));  // gone from the membership, a ttl later
  const std::string scans = "glimpse_cache_node_replication_scans_total";
  const double scans0 = Counter(0, scans), scans2 = Counter(2, scans);
  AwaitWhileReading(*f.client, states, [&] {  // the survivors scan three times more meanwhile
    return Counter(0, scans) >= scans0 + 3 && Counter(2, scans) >= scans2 + 3;
  });
  nodes_[1] = StartNode(1);
  ASSERT_TRUE(nodes_[1].has_value());
  Forget(1);
  ASSERT_TRUE(Lists(*f.client, Addresses({0, 1, 2})));
  AwaitWhileReading(*f.client, states, [&] { return AllOnOwners(states, {0, 1, 2}); });
  EXPECT_EQ(Counter(0, copied), copied0);
  EXPECT_EQ(Counter(2, copied), copied2);
}

}  // namespace
}  // namespace glimpse::cache_node

#include "coordinator/state_store.h"

#include <atomic>
#include <filesystem>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/rocks_state_store.h"
#include "core/etcd/etcd_process.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rocksdb/db.h"

namespace glimpse::coordinator {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("glimpse_coord_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// A session record written before summarised_tokens existed reads back with the KV tokens there.
TEST(SessionRecordTest, AnOlderRecordWithoutSummarisedTokensReadsTheKvTokens) {
  SessionState s;
  s.id = "old";
  s.kv_tokens = 321;
  s.summarised_tokens = 999;
  nlohmann::json j = nlohmann::json::parse(EncodeSession(s));
  ASSERT_TRUE(j.contains("summarised_tokens"));
  EXPECT_EQ(DecodeSession(j.dump())->summarised_tokens, 999);
  j.erase("summarised_tokens");
  absl::StatusOr<SessionState> old = DecodeSession(j.dump());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->summarised_tokens, 321);
}

// Client transport addresses round-trip byte for byte; a node record written before they existed
// reads back with none.
TEST(NodeRecordTest, ClientUcxAddressesRoundTripAndAreOptional) {
  NodeSpec n{"d1", NodeRole::kDecode, "h:1", "inbox", 5, "boot"};
  n.client_ucx_addresses = {std::string("\0\xff\1", 3), "cache-client"};
  absl::StatusOr<NodeSpec> back = DecodeNode(EncodeNode(n));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->client_ucx_addresses, n.client_ucx_addresses);
  nlohmann::json j = nlohmann::json::parse(EncodeNode(n));
  j.erase("client_ucx_addresses");
  absl::StatusOr<NodeSpec> old = DecodeNode(j.dump());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->client_ucx_addresses.empty());
  EXPECT_EQ(old->ucx_address, "inbox");
}

TEST(RocksStateStoreTest, RecordsSurviveReopen) {
  std::string dir = TempDir("store");
  SessionState s;
  s.id = "sess-1";
  s.tenant = "acme";
  s.tier = SessionTier::kLeased;
  s.decode_worker = "d1";
  s.kv_tokens = 1234;
  s.reserved_bytes = 99;
  s.turns = 3;
  s.tool = "grep";
  s.turn_ended = absl::FromUnixMillis(1'800'000'000'123);
  s.ttl = absl::Milliseconds(2500);
  s.lease_expires = s.turn_ended + s.ttl;
  {
    auto store = RocksStateStore::Open({dir, false});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        (*store)
            ->PutNode({"d1", NodeRole::kDecode, "h:1", std::string("\0\1\2", 3), 77, "boot"})
            .ok());
    ASSERT_TRUE((*store)->PutNode({"p1", NodeRole::kPrefill, "h:2", "", 0, ""}).ok());
    ASSERT_TRUE((*store)->DeleteNode("p1").ok());
    ASSERT_TRUE((*store)->PutSession(s).ok());
    ASSERT_TRUE((*store)->PutEstimator("{\"x\":1}").ok());
  }
  auto store = RocksStateStore::Open({dir, false});
  ASSERT_TRUE(store.ok());
  absl::StatusOr<StoredState> st = (*store)->Load();
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->nodes.size(), 1u);
  EXPECT_EQ(st->nodes[0].ucx_address, std::string("\0\1\2", 3));
  EXPECT_EQ(st->nodes[0].capacity_bytes, 77);
  EXPECT_EQ(st->nodes[0].incarnation, "boot");
  ASSERT_EQ(st->sessions.size(), 1u);
  const SessionState& b = st->sessions[0];
  EXPECT_EQ(b.tier, SessionTier::kLeased);
  EXPECT_EQ(b.lease_expires, s.lease_expires);
  EXPECT_EQ(b.turn_started, absl::InfinitePast());
  EXPECT_EQ(b.ttl, s.ttl);
  EXPECT_EQ(b.kv_tokens, 1234);
  EXPECT_EQ(st->estimator_json, "{\"x\":1}");
  std::filesystem::remove_all(dir);
}

// Writers on many threads each wait for durability; every acknowledged record is there after a
// reopen, and the fsyncs never outnumber the writes (concurrent callers may share one).
TEST(RocksStateStoreTest, DurableWritesFromManyThreadsSurviveReopen) {
  const std::string dir = TempDir("store-sync");
  constexpr int kThreads = 8, kEach = 20;
  {
    auto store = RocksStateStore::Open({dir, /*sync=*/true});
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          SessionState s;
          s.id = absl::StrCat("s-", t, "-", i);
          s.tenant = "acme";
          if (!(*store)->PutSession(s).ok() || !(*store)->Durable().ok()) ++failed;
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(failed.load(), 0);
    EXPECT_GE((*store)->syncs(), 1);
    EXPECT_LE((*store)->syncs(), kThreads * kEach);
  }
  auto reopened = RocksStateStore::Open({dir, true});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<StoredState> state = (*reopened)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->sessions.size(), static_cast<size_t>(kThreads * kEach));
  reopened->reset();
  std::filesystem::remove_all(dir);
}

TEST(RocksStateStoreTest, ADiskUnderTheFreeSpaceFloorRefusesWrites) {
  const std::string dir = TempDir("store-room");
  {
    auto roomy = RocksStateStore::Open({dir, false, /*min_free_bytes=*/0});
    ASSERT_TRUE(roomy.ok()) << roomy.status();
    EXPECT_TRUE((*roomy)->CanWrite().ok());
  }
  auto full = RocksStateStore::Open({dir, false, std::numeric_limits<uint64_t>::max()});
  ASSERT_TRUE(full.ok()) << full.status();
  const absl::Status room = (*full)->CanWrite();
  EXPECT_EQ(room.code(), absl::StatusCode::kResourceExhausted) << room;
  EXPECT_NE(room.message().find(dir), std::string::npos) << room;
  full->reset();
  std::filesystem::remove_all(dir);
}

TEST(RocksStateStoreTest, CorruptRecordIsDataLoss) {
  std::string dir = TempDir("corrupt");
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o;
    o.create_if_missing = true;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir, &raw).ok());
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), "s/x", "{\"id\":").ok());
    delete raw;
  }
  auto store = RocksStateStore::Open({dir, false});
  ASSERT_TRUE(store.ok());
  absl::StatusOr<StoredState> st = (*store)->Load();
  EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.status().message().find("s/x"), std::string::npos) << st.status();
  std::filesystem::remove_all(dir);
}

TEST(RocksStateStoreTest, UnopenablePathIsAnError) {
  auto store = RocksStateStore::Open({"/proc/definitely/not/here", false});
  EXPECT_FALSE(store.ok());
}

// Two coordinators' stores under different prefixes of one etcd never see each other's records;
// a record that does not decode is DataLoss naming its key.
TEST(EtcdStateStoreTest, PrefixesAreApartAndACorruptRecordIsDataLoss) {
  auto etcd = etcd::EtcdProcess::Start(TempDir("etcd"));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EtcdStateStoreOptions a, b;
  a.etcd.endpoints = b.etcd.endpoints = {(*etcd)->endpoint()};
  a.prefix = "/cluster-a/";
  b.prefix = "/cluster-b/";
  auto store_a = EtcdStateStore::Create(a);
  auto store_b = EtcdStateStore::Create(b);
  ASSERT_TRUE(store_a.ok() && store_b.ok());
  ASSERT_TRUE((*store_a)->PutNode({"d1", NodeRole::kDecode, "h:1", "u", 7, "boot"}).ok());
  ASSERT_TRUE((*store_a)->PutEstimator("{}").ok());
  ASSERT_TRUE((*store_b)->PutNode({"d9", NodeRole::kDecode, "h:9", "u", 9, "boot"}).ok());
  ASSERT_TRUE((*store_b)->DeleteNode("d9").ok());
  absl::StatusOr<StoredState> got = (*store_a)->Load();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->nodes.size(), 1u);
  EXPECT_EQ(got->nodes[0].capacity_bytes, 7);
  EXPECT_EQ(got->estimator_json, "{}");
  EXPECT_TRUE((*store_b)->Load().value().nodes.empty());

  etcd::EtcdOptions raw;
  raw.endpoints = {(*etcd)->endpoint()};
  ASSERT_TRUE(etcd::EtcdClient::Create(raw).value()->Put("/cluster-b/s/x", "{\"id\":").ok());
  got = (*store_b)->Load();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("s/x"), std::string::npos) << got.status();
  EXPECT_EQ(EtcdStateStore::Create({raw, ""}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Writes from many threads are group-committed: each Durable() covers every write before it, a
// key written twice keeps the last value, batches over etcd's 128 operations per transaction are
// split, and fewer transactions than writes reach etcd.
TEST(EtcdStateStoreTest, ConcurrentWritesAreGroupCommittedAndAllDurable) {
  auto etcd = etcd::EtcdProcess::Start(TempDir("etcd-group"));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EtcdStateStoreOptions o;
  o.etcd.endpoints = {(*etcd)->endpoint()};
  auto store = EtcdStateStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kThreads = 8, kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string id = absl::StrCat("d", t, "-", i);
        ASSERT_TRUE((*store)->PutNode({id, NodeRole::kDecode, "h:1", "u", 1, "old"}).ok());
        ASSERT_TRUE((*store)->PutNode({id, NodeRole::kDecode, "h:1", "u", 2, "new"}).ok());
        ASSERT_TRUE((*store)->Durable().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<StoredState> got = (*store)->Load();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->nodes.size(), size_t{kThreads * kPerThread});
  for (const NodeSpec& n : got->nodes) EXPECT_EQ(n.incarnation, "new") << n.id;
  EXPECT_LT((*store)->transactions(), 2 * kThreads * kPerThread);
  // More keys than one transaction takes, queued before one Durable.
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE((*store)->DeleteNode(absl::StrCat("d", i % kThreads, "-", i / kThreads)).ok());
  }
  ASSERT_TRUE((*store)->Durable().ok());
  EXPECT_EQ((*store)->Load().value().nodes.size(), size_t{kThreads * kPerThread - 300});
  // Estimator samples too large for one etcd value keep the last saved ones, failing nothing.
  ASSERT_TRUE((*store)->PutEstimator("{\"small\":1}").ok());
  ASSERT_TRUE((*store)->PutEstimator(std::string(2 << 20, ' ')).ok());
  ASSERT_TRUE((*store)->Durable().ok());
  EXPECT_EQ((*store)->Load().value().estimator_json, "{\"small\":1}");
}

}  // namespace
}  // namespace glimpse::coordinator

// A CacheClient over several transports: each call goes through the transport with the fewest
// calls in flight (the first on a tie), so a Get is never queued behind another's transfer while
// a transport is idle. Against a real in-process node and gRPC server (loopback transport).
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache-node/test_cache_node.h"
#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

using cache_client::CacheClient;
using kvstate::testing::MakeTestState;
using kvstate::testing::TestModel;
using kvstate::testing::TestNamespace;
using kvstate::testing::TestState;

// Holds back the batches it receives until Open(), and counts the calls that chose it (a Get or
// Put takes its transport's address once).
class HeldTransport final : public transport::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;

  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int chosen() const { return chosen_.load(); }

  std::string LocalAddress() const override {
    chosen_.fetch_add(1);
    return ForwardingTransport::LocalAddress();
  }
  absl::StatusOr<transport::ReceivedBatch> Receive(absl::Time deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return open_; })) {
      return absl::DeadlineExceededError("held");
    }
    lock.unlock();
    return ForwardingTransport::Receive(deadline);
  }

 private:
  mutable std::atomic<int> chosen_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;  // GUARDED_BY(mu_)
};

TestState State(uint64_t seed) {
  auto s = MakeTestState(TestNamespace(), TestModel(), {}, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

void ExpectPages(const absl::StatusOr<cache_client::State>& got, const TestState& want) {
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->pages.size(), want.pages.size());
  for (size_t i = 0; i < want.pages.size(); ++i) {
    EXPECT_TRUE(std::equal(got->pages[i].begin(), got->pages[i].end(), want.pages[i].begin(),
                           want.pages[i].end()));
  }
}

TEST(CacheClientTransportsTest, AGetTakesTheTransportWithFewerCallsInFlight) {
  auto node = testing::TestCacheNode::Start("cache_client_transports");
  ASSERT_TRUE(node.ok()) << node.status();
  auto first = transport::CreateLoopbackTransport((*node)->fabric());
  auto second = transport::CreateLoopbackTransport((*node)->fabric());
  ASSERT_TRUE(first.ok() && second.ok());
  auto held = std::make_unique<HeldTransport>(*std::move(first));
  HeldTransport* held_ptr = held.get();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  transports.push_back(std::move(held));
  transports.push_back(*std::move(second));
  // A short timeout: a Get sent to the held transport would fail here instead of hanging.
  auto client =
      CacheClient::Create({{(*node)->address()}, {}, absl::Seconds(5)}, std::move(transports));
  ASSERT_TRUE(client.ok()) << client.status();

  const TestState a = State(1), b = State(2);
  ASSERT_TRUE((*client)->Put(a.manifest, a.tokens, a.spans()).ok());
  ASSERT_TRUE((*client)->Put(b.manifest, b.tokens, b.spans()).ok());
  EXPECT_EQ(held_ptr->chosen(), 2) << "one call at a time: the first transport each time";

  // Get(a) takes the (idle, first) held transport and waits there for its pages.
  std::atomic<bool> a_done{false};
  absl::StatusOr<cache_client::State> got_a;
  std::thread getter([&] {
    got_a = (*client)->Get(a.manifest.namespace_key, a.manifest.state_key, a.manifest.model);
    a_done.store(true);
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (held_ptr->chosen() < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(held_ptr->chosen(), 3);

  // With one call on the first transport, Get(b) goes through the second and is not held.
  ExpectPages((*client)->Get(b.manifest.namespace_key, b.manifest.state_key, b.manifest.model), b);
  EXPECT_EQ(held_ptr->chosen(), 3);
  EXPECT_FALSE(a_done.load());

  held_ptr->Open();
  getter.join();
  ExpectPages(got_a, a);
}

TEST(CacheClientTransportsTest, NeedsAtLeastOneTransport) {
  auto none = CacheClient::Create({{"127.0.0.1:1"}, {}, absl::Seconds(1)}, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument) << none.status();
  std::vector<std::unique_ptr<transport::Transport>> null_one(1);
  auto null = CacheClient::Create({{"127.0.0.1:1"}, {}, absl::Seconds(1)}, std::move(null_one));
  EXPECT_EQ(null.status().code(), absl::StatusCode::kInvalidArgument) << null.status();
}

}  // namespace
}  // namespace glimpse::cache_node

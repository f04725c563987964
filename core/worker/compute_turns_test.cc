// ComputeTurns: turns go in arrival order, a Yield hands the turn to every job waiting at that
// moment and no other, and a Yield with nobody waiting keeps the turn.
#include "core/worker/compute_turns.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

// Waits (polling: these are conditions, not timing) until the turns show `waiting` waiters.
void AwaitWaiting(const ComputeTurns& turns, int64_t waiting) {
  while (turns.stats().waiting != waiting)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(ComputeTurnsTest, AYieldLetsEveryWaitingJobGoFirstInArrivalOrder) {
  ComputeTurns turns;
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(what);
  };
  std::thread waiter_a, waiter_b;
  {
    ComputeTurns::Turn long_job(turns);
    note("long chunk 1");
    long_job.Yield();  // nobody waits: it keeps the turn
    EXPECT_EQ(turns.stats().yields, 0);
    waiter_a = std::thread([&] {
      ComputeTurns::Turn t(turns);
      note("a");
    });
    AwaitWaiting(turns, 1);
    waiter_b = std::thread([&] {
      ComputeTurns::Turn t(turns);
      note("b");
    });
    AwaitWaiting(turns, 2);
    EXPECT_EQ(turns.stats().computing, 1);
    long_job.Yield();  // a and b go, in that order, then the long job again
    note("long chunk 2");
  }
  waiter_a.join();
  waiter_b.join();
  EXPECT_EQ(order, (std::vector<std::string>{"long chunk 1", "a", "b", "long chunk 2"}));
  const ComputeTurns::Stats s = turns.stats();
  EXPECT_EQ(s.yields, 1);
  EXPECT_EQ(s.computing, 0);
  EXPECT_EQ(s.waiting, 0);
}

}  // namespace
}  // namespace glimpse::worker

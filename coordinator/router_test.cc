#include "coordinator/router.h"

#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

TEST(RouterTest, LeastLoadedDecodeWorkerWithRoom) {
  std::vector<DecodeCandidate> c = {
      {"a", 100, 10, 0},  // no room for 20
      {"b", 100, 50, 3},
      {"c", 100, 30, 1},  // shortest queue with room
      {"d", 100, 90, 1},  // same queue, less used: wins
  };
  EXPECT_EQ(PickDecodeWorker(c, 20), "d");
  c[3].free_bytes = 5;
  EXPECT_EQ(PickDecodeWorker(c, 20), "c");
  EXPECT_EQ(PickDecodeWorker(c, 60), std::nullopt);
  EXPECT_EQ(PickDecodeWorker({}, 0), std::nullopt);
}

TEST(RouterTest, PrefillByQueueLengthShortPromptsOnDecode) {
  std::vector<PrefillCandidate> p = {{"p2", 4}, {"p1", 2}, {"p0", 2}};
  EXPECT_TRUE(PickPrefill(p, 128, 128).on_decode);
  PrefillChoice c = PickPrefill(p, 129, 128);
  EXPECT_FALSE(c.on_decode);
  EXPECT_EQ(c.worker, "p0");
  EXPECT_TRUE(PickPrefill({}, 5000, 128).on_decode);
}

}  // namespace
}  // namespace glimpse::coordinator

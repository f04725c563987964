// StartWorkerBase refuses out-of-range settings before it loads anything, naming the key and the
// value.
#include "core/worker/worker_main.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

absl::Status Start(std::vector<std::string> flags) {
  std::vector<const char*> argv = {"glimpse-decode-worker"};
  for (const std::string& f : flags) argv.push_back(f.c_str());
  absl::StatusOr<Config> c =
      Config::Parse("glimpse-decode-worker", "test", CommonWorkerKeys("decode"),
                    static_cast<int>(argv.size()), argv.data());
  if (!c.ok()) return c.status();
  return StartWorkerBase(*c, v1::NODE_ROLE_DECODE).status();
}

void ExpectRefused(std::vector<std::string> flags, const std::string& message) {
  absl::Status s = Start(std::move(flags));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(message), std::string::npos) << s;
}

TEST(WorkerMainTest, CacheEnginesOutOfRangeAreRefused) {
  ExpectRefused({"--cache_node=127.0.0.1:1", "--cache_engines=0"},
                "cache_engines must be 1 to 4; got 0");
  ExpectRefused({"--cache_node=127.0.0.1:1", "--cache_engines=5"},
                "cache_engines must be 1 to 4; got 5");
}

TEST(WorkerMainTest, RecallSettingsOutOfRangeAreRefused) {
  ExpectRefused({"--recall_share=4.5"}, "recall_share must be in [0, 4]");
  ExpectRefused({"--recall_page_tokens=0"}, "recall_page_tokens >= 1; got 0.5 and 0");
}

}  // namespace
}  // namespace glimpse::worker

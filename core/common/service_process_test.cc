// ServiceProcess: how a child that cannot start says so.
#include "core/common/service_process.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// In the test's scratch directory, which exists only once the tests run (test_scratch.cc).
std::string LogPath() { return ::testing::TempDir() + "/service_process_test.log"; }

absl::StatusOr<ServiceProcess> RunShell(const std::string& script, absl::Duration timeout) {
  return ServiceProcess::StartUntil(
      "/bin/sh", {"-c", script}, LogPath(), [](const std::string& line) { return line == "ready"; },
      timeout);
}

// The child's last error line of this start leads the message (an earlier start's does not),
// then the log's tail.
TEST(ServiceProcessTest, AFailedStartNamesWhatTheChildLastLoggedAsAnError) {
  std::filesystem::remove(LogPath());
  ASSERT_FALSE(
      RunShell(R"(echo '{"level":"error","msg":"old","error":"gone"}'; exit 1)", absl::Seconds(30))
          .ok());
  absl::StatusOr<ServiceProcess> p = RunShell(
      R"(echo '{"level":"info","msg":"starting"}'; )"
      R"(echo '{"level":"error","msg":"start failed","error":"no space left on device"}'; )"
      R"(echo 'not json'; exit 3)",
      absl::Seconds(30));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(p.status().message(),
              HasSubstr("/bin/sh exited with 3 before it was ready (it said \"start failed: no "
                        "space left on device\"); log:\n"));
  EXPECT_THAT(p.status().message(), HasSubstr("not json"));
  EXPECT_THAT(p.status().message(), Not(HasSubstr("it said \"old")));

  // Never ready, nothing logged as an error: the tail alone.
  p = RunShell("echo '{\"level\":\"info\",\"msg\":\"waiting\"}'; sleep 30", absl::Seconds(1));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(p.status().message(), HasSubstr("/bin/sh was not ready in time; log:\n"));
}

}  // namespace
}  // namespace glimpse

// EtcdProcess: how a member that cannot start says so.
#include "core/etcd/etcd_process.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::etcd {
namespace {

using ::testing::HasSubstr;

// A member's directory whose data etcd cannot use (its member directory is a file, as a disk
// that cannot take a new directory would leave it): the start fails, and its message leads with
// what etcd itself said, not only the tail of its log.
TEST(EtcdProcessTest, AFailedStartLeadsWithWhatEtcdSaid) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "etcd-process-unusable";
  std::filesystem::create_directories(dir / "data");
  std::ofstream(dir / "data" / "member") << "not a directory\n";
  const int client_port = FreeLoopbackPort().value();
  const int peer_port = FreeLoopbackPort().value();
  std::ofstream(dir / "ports") << client_port << " " << peer_port << "\n";

  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start(dir.string());
  ASSERT_FALSE(etcd.ok());
  EXPECT_EQ(etcd.status().code(), absl::StatusCode::kUnavailable) << etcd.status();
  EXPECT_THAT(etcd.status().message(),
              HasSubstr("/usr/bin/etcd exited with 1 before it was ready (it said \"failed to "
                        "create snapshot directory: mkdir "));
  EXPECT_THAT(etcd.status().message(), HasSubstr("not a directory\"); log:"));
}

}  // namespace
}  // namespace glimpse::etcd

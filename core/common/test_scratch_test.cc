// The scratch directory every test process gets (test_scratch.cc).
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace {

// gtest's TempDir(), TMPDIR (std::filesystem's temp directory, and mkdtemp's in child services)
// and TEST_TMPDIR name one directory, made for this process: what a test writes there goes when
// its process's tests end.
TEST(TestScratchTest, EveryTemporaryDirectoryIsThisProcesssOwn) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_EQ(dir.filename().string().rfind("glimpse-test-", 0), 0u) << dir;
  EXPECT_EQ(std::filesystem::path(::testing::TempDir()), dir / "");
  EXPECT_EQ(std::string(std::getenv("TEST_TMPDIR")), dir.string());
}

}  // namespace

// Linked into every test binary (cmake/glimpse.cmake): each test process writes its scratch files
// in a directory of its own, removed when its tests end.
//
// Tests name their files after themselves and their pid under gtest's TempDir() (TEST_TMPDIR),
// std::filesystem::temp_directory_path() (TMPDIR) or mkdtemp; none removed them, and an etcd
// member alone preallocates a 64 MiB WAL. A machine that ran the suite a few hundred times filled
// its disk, and the next run's etcd could not start. Here both variables point at a fresh
// directory below the one the caller gave (ctest gives one below the build tree) for the length
// of RUN_ALL_TESTS, so that every path a test or its child services derive from them goes away
// with it. A test that crashes leaves its directory behind, for whoever reads why.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace {

class ScratchDirectory : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* root = std::getenv("TEST_TMPDIR");
    std::string tmpl =
        std::string(root != nullptr && *root != '\0' ? root : "/tmp") + "/glimpse-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "cannot make a scratch directory " << tmpl;
    dir_ = tmpl;
    setenv("TEST_TMPDIR", dir_.c_str(), 1);
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
    if (error)
      std::fprintf(stderr, "cannot remove %s: %s\n", dir_.c_str(), error.message().c_str());
  }

 private:
  std::string dir_;
};

// gtest owns the environment; registered before main() runs.
[[maybe_unused]] ::testing::Environment* const kScratch =
    ::testing::AddGlobalTestEnvironment(new ScratchDirectory);

}  // namespace

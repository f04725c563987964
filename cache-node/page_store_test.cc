#include "cache-node/page_store.h"

#include <atomic>
#include <filesystem>

#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace glimpse::cache_node {
namespace {

using kvstate::testing::MakeTestState;
using kvstate::testing::TestModel;
using kvstate::testing::TestNamespace;
using kvstate::testing::TestState;

// A file system whose writes fail with NoSpace while `full` is set: the disk-full seam.
class FullDiskFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FullDiskFs(std::shared_ptr<std::atomic<bool>> full)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), full_(std::move(full)) {}
  const char* Name() const override { return "FullDiskFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
    if (s.ok()) r->reset(new File(std::move(file), full_));
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> t, std::shared_ptr<std::atomic<bool>> full)
        : FSWritableFileOwnerWrapper(std::move(t)), full_(std::move(full)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (full_->load()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return FSWritableFileOwnerWrapper::Append(d, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* dbg) override {
      if (full_->load()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return FSWritableFileOwnerWrapper::Append(d, o, v, dbg);
    }

   private:
    std::shared_ptr<std::atomic<bool>> full_;
  };
  std::shared_ptr<std::atomic<bool>> full_;
};

class PageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("page_store_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    options_.path = dir_.string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<PageStore> Open() {
    auto s = PageStore::Open(options_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  static TestState State(uint64_t seed) {
    auto s = MakeTestState(TestNamespace(), TestModel(), {}, seed);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  static void ExpectStored(PageStore& store, const TestState& s) {
    auto got = store.Read(s.manifest.state_key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->manifest.SameContent(s.manifest));
    ASSERT_EQ(got->bytes.size(), s.pages.size());
    for (size_t i = 0; i < s.pages.size(); ++i) {
      EXPECT_EQ(
          got->bytes[i].ToStringView(),
          std::string_view(reinterpret_cast<const char*>(s.pages[i].data()), s.pages[i].size()));
    }
  }

  std::filesystem::path dir_;
  PageStoreOptions options_;
};

TEST_F(PageStoreTest, CommitReadDeleteAndReopen) {
  TestState a = State(1), b = State(2);
  {
    auto store = Open();
    ASSERT_TRUE(store->Commit(a.manifest, a.spans(), {}).ok());
    ASSERT_TRUE(store->Commit(b.manifest, b.spans(), {}).ok());
    ASSERT_TRUE(store->SetPinned(b.manifest.state_key, true).ok());
    ExpectStored(*store, a);
  }
  auto store = Open();
  ExpectStored(*store, a);
  ExpectStored(*store, b);
  std::vector<kvstate::Manifest> all;
  ASSERT_TRUE(store->ForEachManifest([&](kvstate::Manifest m) { all.push_back(m); }).ok());
  EXPECT_EQ(all.size(), 2u);
  auto pins = store->LoadPins();
  ASSERT_TRUE(pins.ok());
  ASSERT_EQ(pins->size(), 1u);
  EXPECT_EQ((*pins)[0], b.manifest.state_key);
  // A commit that displaces `a` in the same batch.
  TestState c = State(3);
  std::vector<kvstate::Manifest> victims = {a.manifest};
  ASSERT_TRUE(store->Commit(c.manifest, c.spans(), victims).ok());
  EXPECT_EQ(store->Read(a.manifest.state_key).status().code(), absl::StatusCode::kNotFound);
  ExpectStored(*store, c);
  std::vector<kvstate::Manifest> del = {c.manifest};
  ASSERT_TRUE(store->Delete(del).ok());
  EXPECT_EQ(store->ReadManifest(c.manifest.state_key).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PageStoreTest, ReadSelectsPagesUnderOneSnapshot) {
  TestState a = State(1);
  auto store = Open();
  ASSERT_TRUE(store->Commit(a.manifest, a.spans(), {}).ok());
  auto got = store->Read(a.manifest.state_key, [](const kvstate::Manifest&) {
    return absl::StatusOr<std::vector<size_t>>(std::vector<size_t>{1, 3});
  });
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->bytes.size(), 2u);
  EXPECT_EQ(got->bytes[1].size(), a.pages[3].size());
  auto refused = store->Read(a.manifest.state_key, [](const kvstate::Manifest&) {
    return absl::StatusOr<std::vector<size_t>>(absl::FailedPreconditionError("no"));
  });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PageStoreTest, DiskFullIsResourceExhaustedAndLeavesNothingHalfWritten) {
  auto full = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(std::make_shared<FullDiskFs>(full));
  options_.env = env.get();
  TestState a = State(1), b = State(2);
  {
    auto store = Open();
    ASSERT_TRUE(store->Commit(a.manifest, a.spans(), {}).ok());
    full->store(true);
    absl::Status s = store->Commit(b.manifest, b.spans(), {});
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("disk full"), std::string::npos) << s;
    EXPECT_EQ(store->ReadManifest(b.manifest.state_key).status().code(),
              absl::StatusCode::kNotFound);
    ExpectStored(*store, a);
  }
  full->store(false);
  auto store = Open();
  ExpectStored(*store, a);
  EXPECT_EQ(store->Read(b.manifest.state_key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Commit(b.manifest, b.spans(), {}).ok());
  ExpectStored(*store, b);
}

TEST(FromRocksTest, MapsCodes) {
  EXPECT_EQ(FromRocks(rocksdb::Status::NoSpace(), "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FromRocks(rocksdb::Status::IOError(), "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(FromRocks(rocksdb::Status::Corruption(), "x").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FromRocks(rocksdb::Status::NotFound(), "x").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(FromRocks(rocksdb::Status::OK(), "x").ok());
}

}  // namespace
}  // namespace glimpse::cache_node

// EtcdClient against a real etcd member (core/etcd/etcd_process.h).
#include "core/etcd/etcd_client.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/grpc/certificates.h"
#include "core/etcd/etcd_process.h"
#include "gtest/gtest.h"

namespace glimpse::etcd {
namespace {

std::string TestDir(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "etcd-client-", name, "-", getpid());
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start(
        TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }
  std::unique_ptr<EtcdClient> Client(std::vector<std::string> endpoints, int64_t page_keys = 512) {
    EtcdOptions o;
    o.endpoints = std::move(endpoints);
    o.timeout = absl::Seconds(2);
    o.page_keys = page_keys;
    return EtcdClient::Create(o).value();
  }
  std::unique_ptr<EtcdProcess> etcd_;
};

TEST(PrefixEndTest, IsTheFirstKeyPastThePrefix) {
  EXPECT_EQ(PrefixEnd("a/"), "a0");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd("\xff\xff"), std::string(1, '\0'));
}

TEST(EtcdClientCreateTest, RefusesNoEndpointsAndABadPageSize) {
  EXPECT_EQ(EtcdClient::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:1"};
  o.page_keys = 0;
  EXPECT_EQ(EtcdClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, PutGetPrefixAndDeleteSeeOnlyTheirPrefix) {
  std::unique_ptr<EtcdClient> c = Client({etcd_->endpoint()});
  ASSERT_TRUE(c->Put("/g/s/b", "2").ok());
  ASSERT_TRUE(c->Put("/g/s/a", "1").ok());
  ASSERT_TRUE(c->Put("/g/t", "other").ok());
  ASSERT_TRUE(c->Put("/g/s/a", "1b").ok());  // replaces
  absl::StatusOr<KeyValues> got = c->GetPrefix("/g/s/");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (KeyValues{{"/g/s/a", "1b"}, {"/g/s/b", "2"}}));
  ASSERT_TRUE(c->Delete("/g/s/a").ok());
  ASSERT_TRUE(c->Delete("/g/s/never").ok());
  EXPECT_EQ(c->GetPrefix("/g/s/").value(), (KeyValues{{"/g/s/b", "2"}}));
  EXPECT_EQ(c->GetPrefix("").status().code(), absl::StatusCode::kInvalidArgument);
  // etcd's own refusal keeps its code: an empty key.
  EXPECT_EQ(c->Put("", "x").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, ApplyPutsAndDeletesInOneTransaction) {
  std::unique_ptr<EtcdClient> c = Client({etcd_->endpoint()});
  ASSERT_TRUE(c->Put("/a/gone", "x").ok());
  ASSERT_TRUE(c->Apply({{"/a/1", "one"}, {"/a/gone", std::nullopt}, {"/a/2", "two"}}).ok());
  EXPECT_EQ(c->GetPrefix("/a/").value(), (KeyValues{{"/a/1", "one"}, {"/a/2", "two"}}));
  // etcd refuses a key twice in one transaction: nothing of it is applied.
  EXPECT_EQ(c->Apply({{"/a/3", "three"}, {"/a/3", "again"}}).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<EtcdClient::Write> too_many;
  for (size_t i = 0; i <= EtcdClient::kMaxTxnOps; ++i)
    too_many.emplace_back(absl::StrCat("/b/", i), "v");
  EXPECT_EQ(c->Apply(too_many).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->GetPrefix("/a/").value().size(), 2u);
  EXPECT_TRUE(c->GetPrefix("/b/").value().empty());
}

TEST_F(EtcdClientTest, GetPrefixReadsEveryPage) {
  std::unique_ptr<EtcdClient> c = Client({etcd_->endpoint()}, /*page_keys=*/3);
  KeyValues want;
  for (int i = 0; i < 10; ++i) {
    want.emplace_back(absl::StrFormat("/p/%02d", i), std::string(i, 'v'));
    ASSERT_TRUE(c->Put(want.back().first, want.back().second).ok());
  }
  EXPECT_EQ(c->GetPrefix("/p/").value(), want);
}

// Three values of 1.4 MiB (etcd takes requests up to 1.5 MiB) pass gRPC's 4 MiB reply limit in
// one page: the read goes on with smaller pages.
TEST_F(EtcdClientTest, GetPrefixReadsValuesTooLargeForOnePage) {
  std::unique_ptr<EtcdClient> c = Client({etcd_->endpoint()});
  const std::string big(1400 << 10, 'v');
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->Put(absl::StrCat("/big/", i), big).ok());
  absl::StatusOr<KeyValues> got = c->GetPrefix("/big/");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  for (const auto& [key, value] : *got) EXPECT_EQ(value.size(), big.size()) << key;
}

TEST_F(EtcdClientTest, ADeadEndpointIsSkippedAndNoneAliveIsUnavailable) {
  // The first endpoint never answers; calls go on to the live member.
  std::unique_ptr<EtcdClient> c = Client({"127.0.0.1:1", etcd_->endpoint()});
  ASSERT_TRUE(c->Put("/k", "before").ok());
  etcd_->Kill();
  absl::Status down = c->Put("/k", "during");
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_NE(down.message().find(etcd_->endpoint()), std::string::npos) << down;
  // What etcd acknowledged survives its SIGKILL.
  ASSERT_TRUE(etcd_->Restart().ok());
  absl::StatusOr<KeyValues> got = c->GetPrefix("/k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (KeyValues{{"/k", "before"}}));
}

TEST(EtcdTlsTest, ClientsNeedTheClustersCaAndACertificateItSigned) {
  const std::string dir = TestDir("tls");
  ASSERT_TRUE(MakeCertificates(dir + "/tls", {{"etcd"}, {"coordinator"}}).ok());
  MakeCertificates(dir + "/other-ca", {{"stranger"}}).IgnoreError();
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
      EtcdProcess::Start(dir + "/etcd", CertificateFiles(dir + "/tls", "etcd"));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  auto client = [&](const TlsFiles& tls) {
    EtcdOptions o;
    o.endpoints = {(*etcd)->endpoint()};
    o.timeout = absl::Seconds(2);
    o.tls = tls;
    return EtcdClient::Create(o).value();
  };
  const TlsFiles mine = CertificateFiles(dir + "/tls", "coordinator");
  ASSERT_TRUE(client(mine)->Put("/k", "v").ok());
  EXPECT_EQ(client(mine)->Get("/k").value()->value, "v");
  EXPECT_EQ(client({})->Put("/k", "plaintext").code(), absl::StatusCode::kUnavailable);
  TlsFiles no_certificate;
  no_certificate.ca_file = mine.ca_file;
  EXPECT_FALSE(client(no_certificate)->Put("/k", "anonymous").ok());
  EXPECT_FALSE(client(CertificateFiles(dir + "/other-ca", "stranger"))->Put("/k", "x").ok());
  EXPECT_EQ(client(mine)->Get("/k").value()->value, "v");
  // Members' certificates name them all with a wildcard, as a whole first label only.
  EXPECT_TRUE(MakeCertificates(dir + "/wild", {{"etcd", "", "", {"*.glimpse-etcd"}}}).ok());
  for (const char* bad : {"a.*", "*", "*x.y", "*.*.y"}) {
    EXPECT_EQ(MakeCertificates(dir + "/wild", {{"etcd", "", "", {bad}}}).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace glimpse::etcd

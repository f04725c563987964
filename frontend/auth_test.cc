#include "frontend/auth.h"

#include <fstream>

#include "core/model/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = model::testing::MakeTempDir("frontend_auth") + "/" + name;
  model::testing::WriteFile(path, text);
  return path;
}

TEST(AuthenticatorTest, TokenNamesTenant) {
  const std::string path =
      WriteTemp("tokens.yaml", "tok-acme-0123456789: acme\n\"tok beta\": beta\ntok-acme-2: acme\n");
  auto auth = Authenticator::FromFile(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->enabled());
  EXPECT_EQ((*auth)->tenants(), 2u);
  EXPECT_EQ((*auth)->Authenticate("Bearer tok-acme-0123456789").value(), "acme");
  EXPECT_EQ((*auth)->Authenticate("bearer tok-acme-2").value(), "acme");  // scheme: any case
  EXPECT_EQ((*auth)->Authenticate("Bearer tok beta").value(), "beta");
}

TEST(AuthenticatorTest, MissingOrWrongTokenIsUnauthenticated) {
  auto auth = Authenticator::FromMap({{"secret-token", "acme"}});
  ASSERT_TRUE(auth.ok());
  for (std::optional<std::string_view> bad :
       {std::optional<std::string_view>(), std::optional<std::string_view>(""),
        std::optional<std::string_view>("secret-token"),
        std::optional<std::string_view>("Basic secret-token"),
        std::optional<std::string_view>("Bearer "),
        std::optional<std::string_view>("Bearer secret-tokenX"),
        std::optional<std::string_view>("Bearer secret")}) {
    absl::StatusOr<std::string> tenant = (*auth)->Authenticate(bad);
    EXPECT_EQ(tenant.status().code(), absl::StatusCode::kUnauthenticated)
        << (bad ? *bad : "(absent)");
    // Never echoes what was sent.
    EXPECT_EQ(tenant.status().message().find("secret"), std::string_view::npos);
  }
}

TEST(AuthenticatorTest, NoneMakesEveryoneDefault) {
  auto auth = Authenticator::None();
  EXPECT_FALSE(auth->enabled());
  EXPECT_EQ(auth->Authenticate(std::nullopt).value(), kDefaultTenant);
  EXPECT_EQ(auth->Authenticate("Bearer anything").value(), kDefaultTenant);
}

TEST(AuthenticatorTest, BadFilesNameTheProblem) {
  auto missing = Authenticator::FromFile("/nonexistent/tokens.yaml");
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/tokens.yaml"));
  auto list = Authenticator::FromFile(WriteTemp("list.yaml", "- a\n- b\n"));
  EXPECT_THAT(list.status().message(), HasSubstr("want a YAML map"));
  auto syntax = Authenticator::FromFile(WriteTemp("bad.yaml", "a: [b\n"));
  EXPECT_THAT(syntax.status().message(), HasSubstr("YAML error"));
  auto tenant = Authenticator::FromFile(WriteTemp("colon.yaml", "tok: \"ac:me\"\n"));
  EXPECT_THAT(tenant.status().message(), HasSubstr("ac:me"));
  auto nested = Authenticator::FromFile(WriteTemp("nested.yaml", "tok: {a: b}\n"));
  EXPECT_THAT(nested.status().message(), HasSubstr("want token: tenant"));
  auto empty = Authenticator::FromFile(WriteTemp("empty.yaml", "{}\n"));
  EXPECT_THAT(empty.status().message(), HasSubstr("no tokens"));
}

TEST(TenantSaltTest, DiffersByTenantAndSecretEqualOtherwise) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(TenantSalt(secret, "acme").size(), 32u);
  EXPECT_EQ(TenantSalt(secret, "acme"), TenantSalt(secret, "acme"));
  EXPECT_NE(TenantSalt(secret, "acme"), TenantSalt(secret, "beta"));
  EXPECT_NE(TenantSalt(secret, "acme"), TenantSalt(secret + "x", "acme"));
  // RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?").
  const std::string mac = TenantSalt("Jefe", "what do ya want for nothing?");
  EXPECT_EQ(static_cast<unsigned char>(mac[0]), 0x5b);
  EXPECT_EQ(static_cast<unsigned char>(mac[31]), 0x43);
}

TEST(TenantSaltTest, SecretFile) {
  EXPECT_EQ(LoadSaltSecret(WriteTemp("s1", "0123456789abcdef0123\n")).value(),
            "0123456789abcdef0123");
  EXPECT_THAT(LoadSaltSecret(WriteTemp("s2", "short\n")).status().message(),
              HasSubstr("at least 16"));
  auto a = RandomSaltSecret();
  auto b = RandomSaltSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
}

TEST(ScopedSessionIdTest, SeparatesTenants) {
  const std::string a = ScopedSessionId("acme", "s1");
  EXPECT_EQ(a, ScopedSessionId("acme", "s1"));
  EXPECT_NE(a, ScopedSessionId("beta", "s1"));
  EXPECT_NE(a, ScopedSessionId("acme", "s2"));
  EXPECT_EQ(a.rfind("acme:", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 32u);
  const std::string longest(64, 't');
  EXPECT_LE(ScopedSessionId(longest, std::string(128, 's')).size(), 128u);
}

TEST(ValidateTenantTest, Names) {
  EXPECT_TRUE(ValidateTenant("acme-1.prod_2").ok());
  EXPECT_FALSE(ValidateTenant("").ok());
  EXPECT_FALSE(ValidateTenant(std::string(65, 'a')).ok());
  EXPECT_FALSE(ValidateTenant("a:b").ok());
  EXPECT_FALSE(ValidateTenant("a b").ok());
}

}  // namespace
}  // namespace glimpse::frontend

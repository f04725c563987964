#include "frontend/frontend_config.h"

#include "core/model/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Config> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "glimpse-frontend");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return Config::Parse("glimpse-frontend", "test", FrontendConfigKeys(),
                       static_cast<int>(argv.size()), argv.data());
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = model::testing::MakeTempDir("frontend_config") + "/" + name;
  model::testing::WriteFile(path, text);
  return path;
}

TEST(FrontendConfigTest, DefaultsAndOverrides) {
  auto config = Parse({"--coordinator=127.0.0.1:7400", "--policy.method=snapkv",
                       "--policy.budget_ratio=0.25", "--routing.max_queue_wait=2s"});
  ASSERT_TRUE(config.ok()) << config.status();
  auto options = OptionsFromConfig(*config);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->coordinator_addresses, std::vector<std::string>{"127.0.0.1:7400"});
  EXPECT_EQ(options->default_policy.method(), "snapkv");
  EXPECT_EQ(options->default_policy.budget_ratio(), 0.25);
  EXPECT_EQ(options->default_policy.codec(), "fp16");
  EXPECT_EQ(options->max_queue_wait, absl::Seconds(2));
  EXPECT_EQ(options->default_max_tokens, 256);
}

TEST(FrontendConfigTest, BadValuesNameTheKey) {
  EXPECT_THAT(Parse({}).status().message(), HasSubstr("coordinator"));
  auto bad = [](std::vector<std::string> args) {
    args.push_back("--coordinator=c:1");
    auto config = Parse(args);
    EXPECT_TRUE(config.ok()) << config.status();
    return std::string(OptionsFromConfig(*config).status().message());
  };
  EXPECT_THAT(bad({"--policy.method=magic"}), HasSubstr("policy.method \"magic\""));
  EXPECT_THAT(bad({"--policy.method=h2o"}), HasSubstr("policy.budget_ratio = 0"));
  EXPECT_THAT(bad({"--policy.codec=zip"}), HasSubstr("policy.codec \"zip\""));
  EXPECT_THAT(bad({"--limits.default_max_tokens=0"}), HasSubstr("limits.default_max_tokens"));
  EXPECT_THAT(bad({"--limits.max_prompt_tokens=-1"}), HasSubstr("limits.max_prompt_tokens"));
  EXPECT_THAT(bad({"--client_tls.cert=c.pem"}), HasSubstr("client_tls.ca"));
  EXPECT_THAT(bad({"--coordinator_timeout=0s"}), HasSubstr("coordinator_timeout"));
}

TEST(FrontendConfigTest, TokensRequireASaltSecret) {
  const std::string tokens = WriteTemp("tokens.yaml", "tok-a: acme\n");
  const std::string secret = WriteTemp("salt", "0123456789abcdef0123456789abcdef\n");
  auto without = Parse({"--coordinator=c:1", "--auth.tokens_file=" + tokens});
  ASSERT_TRUE(without.ok());
  EXPECT_THAT(LoadTenancy(*without).status().message(), HasSubstr("auth.salt_secret_file"));

  auto with = Parse(
      {"--coordinator=c:1", "--auth.tokens_file=" + tokens, "--auth.salt_secret_file=" + secret});
  ASSERT_TRUE(with.ok());
  auto tenancy = LoadTenancy(*with);
  ASSERT_TRUE(tenancy.ok()) << tenancy.status();
  EXPECT_TRUE(tenancy->auth->enabled());
  EXPECT_EQ(tenancy->salt_secret, "0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(tenancy->random_secret);

  // No authentication and no secret: a random one (a warning is logged).
  auto open = Parse({"--coordinator=c:1"});
  ASSERT_TRUE(open.ok());
  auto random = LoadTenancy(*open);
  ASSERT_TRUE(random.ok());
  EXPECT_FALSE(random->auth->enabled());
  EXPECT_TRUE(random->random_secret);
  EXPECT_EQ(random->salt_secret.size(), 32u);
}

}  // namespace
}  // namespace glimpse::frontend

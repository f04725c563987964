#include "tools/cli/args.h"

#include <vector>

#include "gtest/gtest.h"

namespace glimpse::cli {
namespace {

const std::vector<FlagSpec> kSpecs = {
    {"model", "", false, ""}, {"json", "", true, ""}, {"max-tokens", "", false, ""}};

absl::StatusOr<Args> ParseAll(std::vector<const char*> argv) {
  return Args::Parse(kSpecs, static_cast<int>(argv.size()), const_cast<char**>(argv.data()), 0);
}

TEST(ArgsTest, ParsesSeparateAndInlineValuesAndBooleans) {
  auto args = ParseAll({"--model", "m.gguf", "--max-tokens=12", "--json"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->GetString("model"), "m.gguf");
  EXPECT_EQ(*args->GetInt("max-tokens", 0), 12);
  EXPECT_TRUE(args->Has("json"));
  EXPECT_EQ(*args->GetInt("absent", 7), 7);
}

TEST(ArgsTest, RejectsUnknownFlagsMissingValuesAndStrayWords) {
  EXPECT_NE(ParseAll({"--nope"}).status().message().find("unknown flag --nope"), std::string::npos);
  EXPECT_NE(ParseAll({"--model"}).status().message().find("needs a value"), std::string::npos);
  EXPECT_NE(ParseAll({"stray"}).status().message().find("unexpected argument"), std::string::npos);
  EXPECT_FALSE(ParseAll({"--json=yes"}).ok());
}

TEST(ArgsTest, RejectsMalformedNumbers) {
  auto args = ParseAll({"--max-tokens", "12x"});
  ASSERT_TRUE(args.ok());
  auto value = args->GetInt("max-tokens", 0);
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.status().message().find("expects an integer, got '12x'"), std::string::npos);
}

}  // namespace
}  // namespace glimpse::cli

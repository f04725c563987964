#include "core/common/config.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

std::vector<ConfigKey> Keys() {
  return {
      {"listen", ConfigType::kString, "127.0.0.1:0", "Address to serve gRPC on."},
      {"workers", ConfigType::kInt, "4", "Worker threads."},
      {"ratio", ConfigType::kDouble, "0.5", "A ratio."},
      {"verbose", ConfigType::kBool, "false", "Log more."},
      {"lease", ConfigType::kDuration, "30s", "Lease length."},
      {"storage.capacity", ConfigType::kBytes, "64KiB", "Bytes to keep."},
      {"storage.path", ConfigType::kString, "", "Where pages live.", /*required=*/true},
      {"peers", ConfigType::kStringList, "", "Other nodes."},
  };
}

absl::StatusOr<Config> ParseArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return Config::Parse("prog", "Does things.", Keys(), static_cast<int>(argv.size()), argv.data());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

void ExpectError(const absl::StatusOr<Config>& config, const std::vector<std::string>& parts) {
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  for (const std::string& part : parts) {
    EXPECT_TRUE(absl::StrContains(config.status().message(), part))
        << "'" << part << "' missing from: " << config.status();
  }
}

TEST(ConfigTest, DefaultsApply) {
  const auto config = ParseArgs({"--storage.path=/d"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetString("listen"), "127.0.0.1:0");
  EXPECT_EQ(config->GetInt("workers"), 4);
  EXPECT_EQ(config->GetDouble("ratio"), 0.5);
  EXPECT_FALSE(config->GetBool("verbose"));
  EXPECT_EQ(config->GetDuration("lease"), absl::Seconds(30));
  EXPECT_EQ(config->GetBytes("storage.capacity"), 64 * 1024);
  EXPECT_EQ(config->GetString("storage.path"), "/d");
  EXPECT_TRUE(config->GetStringList("peers").empty());
  EXPECT_FALSE(config->help_requested());
}

TEST(ConfigTest, FileThenFlagsOverride) {
  const std::string file = WriteFile("ok.yaml",
                                     "workers: 8\n"
                                     "lease: 250ms\n"
                                     "storage:\n"
                                     "  path: /from/file\n"
                                     "  capacity: 2GiB\n"
                                     "peers: [a:1, b:2]\n"
                                     "verbose: true\n");
  const auto config = ParseArgs({"--workers", "16", "--config", file, "--ratio=0.25"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetInt("workers"), 16);  // the flag wins even though it came first
  EXPECT_EQ(config->GetDuration("lease"), absl::Milliseconds(250));
  EXPECT_EQ(config->GetString("storage.path"), "/from/file");
  EXPECT_EQ(config->GetBytes("storage.capacity"), int64_t{2} << 30);
  EXPECT_EQ(config->GetStringList("peers"), (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_TRUE(config->GetBool("verbose"));
  EXPECT_EQ(config->GetDouble("ratio"), 0.25);
}

TEST(ConfigTest, FlagForms) {
  const auto config = ParseArgs({"--storage.path", "/p", "--verbose", "--peers=x,y", "--lease=5m",
                                 "--storage.capacity=4096"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->GetBool("verbose"));
  EXPECT_EQ(config->GetStringList("peers"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(config->GetDuration("lease"), absl::Minutes(5));
  EXPECT_EQ(config->GetBytes("storage.capacity"), 4096);
  const auto off = ParseArgs({"--storage.path=/p", "--verbose", "false", "--lease=2h"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->GetBool("verbose"));
  EXPECT_EQ(off->GetDuration("lease"), absl::Hours(2));
}

TEST(ConfigTest, UnknownKeyInFileNamesKeyFileAndLine) {
  const std::string file = WriteFile("unknown.yaml", "workers: 2\nstorage:\n  pathh: /x\n");
  ExpectError(ParseArgs({"--config", file}), {"unknown key storage.pathh", file + ":3"});
}

TEST(ConfigTest, UnknownFlag) {
  ExpectError(ParseArgs({"--storage.path=/p", "--wrokers=3"}), {"unknown flag --wrokers"});
}

TEST(ConfigTest, PositionalArgumentIsAnError) {
  ExpectError(ParseArgs({"stray"}), {"unexpected argument 'stray'"});
}

TEST(ConfigTest, FlagWithoutValue) {
  ExpectError(ParseArgs({"--storage.path=/p", "--workers"}), {"--workers needs a value"});
}

TEST(ConfigTest, WrongTypeInFile) {
  const std::string file = WriteFile("type.yaml", "storage:\n  path: /p\nworkers: many\n");
  ExpectError(ParseArgs({"--config", file}), {"workers", "(int)", "'many'", file + ":3"});
  const std::string map_file = WriteFile("map.yaml", "storage:\n  path: /p\nworkers: {a: 1}\n");
  ExpectError(ParseArgs({"--config", map_file}), {"workers", "got a map"});
}

TEST(ConfigTest, WrongTypeInFlag) {
  ExpectError(ParseArgs({"--storage.path=/p", "--verbose=yes"}),
              {"flag --verbose", "bad value for verbose (bool)", "'yes'"});
  ExpectError(ParseArgs({"--storage.path=/p", "--ratio=half"}), {"ratio (double)", "'half'"});
}

TEST(ConfigTest, YamlSyntaxErrorHasLine) {
  const std::string file = WriteFile("syntax.yaml", "workers: 2\nstorage: [unclosed\n");
  ExpectError(ParseArgs({"--config", file}), {"YAML syntax error", file + ":"});
  const auto config = ParseArgs({"--config", file});
  // The error is reported on a line of the file past the first.
  EXPECT_FALSE(absl::StrContains(config.status().message(), file + ":1:"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  const auto config = ParseArgs({"--config=/nonexistent/glimpse.yaml"});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(config.status().message(), "/nonexistent/glimpse.yaml"));
}

TEST(ConfigTest, MissingRequiredKey) {
  ExpectError(ParseArgs({}), {"missing required key storage.path"});
}

TEST(ConfigTest, BadDurations) {
  for (const std::string bad : {"30", "-5s", "inf", "5 minutes", ""}) {
    ExpectError(ParseArgs({"--storage.path=/p", "--lease=" + bad}), {"lease (duration)"});
  }
}

TEST(ConfigTest, BadBytes) {
  for (const std::string bad : {"64KB", "-1", "1.5GiB", "GiB", "99999999999TiB", ""}) {
    ExpectError(ParseArgs({"--storage.path=/p", "--storage.capacity=" + bad}),
                {"storage.capacity (bytes)", "'" + bad + "'"});
  }
}

TEST(ConfigTest, HelpListsEveryKeyWithTypeDefaultAndHelp) {
  const auto config = ParseArgs({"--workers=bad", "--help"});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->help_requested());
  const std::string& help = config->help_text();
  EXPECT_TRUE(absl::StartsWith(help, "prog: Does things.\n")) << help;
  EXPECT_TRUE(absl::StrContains(help, "--config"));
  for (const std::string line :
       {"--listen (string, default \"127.0.0.1:0\")\n      Address to serve gRPC on.",
        "--workers (int, default \"4\")\n      Worker threads.",
        "--ratio (double, default \"0.5\")", "--verbose (bool, default \"false\")",
        "--lease (duration, default \"30s\")", "--storage.capacity (bytes, default \"64KiB\")",
        "--storage.path (string, required)\n      Where pages live.",
        "--peers (string list, default \"\")\n      Other nodes."}) {
    EXPECT_TRUE(absl::StrContains(help, line)) << "missing: " << line << "\nin:\n" << help;
  }
}

TEST(ConfigDeathTest, GetterWithWrongTypeAborts) {
  const auto config = ParseArgs({"--storage.path=/p"});
  ASSERT_TRUE(config.ok());
  EXPECT_DEATH(config->GetInt("listen"), "listen");
  EXPECT_DEATH(config->GetString("nope"), "nope");
}

}  // namespace
}  // namespace glimpse

// Runs the real `glimpse` binary: good paths and every bad input the CLI must refuse with a clear
// message and a non-zero exit (never a crash).
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/model/model_store.h"
#include "core/model/test_files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `glimpse <args>` through the shell, with `input` on stdin.
CliRun Glimpse(const std::string& args, const std::string& input = "") {
  const std::string command =
      "printf '%b' '" + input + "' | " + GLIMPSE_BINARY + " " + args + " 2>&1";
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("glimpse_cli_test_" + name)).string();
}

std::string ModelFlag() { return "--model " + model::DefaultModelPath(); }

TEST(CliTest, UsageErrorsExitWithTwo) {
  EXPECT_EQ(Glimpse("").exit_code, 2);
  EXPECT_EQ(Glimpse("frobnicate").exit_code, 2);
  const CliRun run = Glimpse("generate --max-tokens 3");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("give --prompt TEXT"), std::string::npos) << run.output;
  EXPECT_EQ(Glimpse("generate --prompt hi --max-tokens zero").exit_code, 2);
  EXPECT_EQ(Glimpse("generate --help").exit_code, 0);
}

TEST(CliTest, MissingModelFileIsNamed) {
  const CliRun run = Glimpse("generate --model /nonexistent/m.gguf --prompt hi");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("/nonexistent/m.gguf"), std::string::npos) << run.output;
}

TEST(CliTest, TruncatedModelIsRejected) {
  const std::string path = TempPath("truncated.gguf");
  {
    std::ifstream in(model::DefaultModelPath(), std::ios::binary);
    std::vector<char> head(3 << 20);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(path, std::ios::binary).write(head.data(), in.gcount());
  }
  const CliRun run = Glimpse("generate --model " + path + " --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(path), std::string::npos) << run.output;
  std::filesystem::remove(path);
}

TEST(CliTest, UnsupportedTensorTypeIsNamed) {
  const std::string path = TempPath("q5_0.gguf");
  model::testing::GgufBuilder builder;
  builder.SetString("general.architecture", "llama");
  builder.AddTensor("token_embd.weight", /*type=Q5_0*/ 6, {256, 4}, std::string(4 * 8 * 22, '\0'));
  const std::string bytes = builder.Build().bytes;
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const CliRun run = Glimpse("generate --model " + path + " --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("token_embd.weight"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("unsupported tensor type 6"), std::string::npos) << run.output;
  std::filesystem::remove(path);
}

TEST(CliTest, TokenIdOutOfRangeIsNamed) {
  const CliRun run = Glimpse("generate " + ModelFlag() + " --prompt-tokens 1,49152");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("token id 49152 at index 1 is out of range"), std::string::npos)
      << run.output;
  EXPECT_EQ(Glimpse("generate " + ModelFlag() + " --prompt-tokens 1,x").exit_code, 2);
}

TEST(CliTest, PromptLongerThanContextIsRejected) {
  const CliRun run =
      Glimpse("generate " + ModelFlag() +
              " --context 8 --prompt 'one two three four five six seven eight nine'");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("exceeds the context length 8"), std::string::npos) << run.output;
  EXPECT_EQ(Glimpse("generate " + ModelFlag() + " --context 100000 --prompt hi").exit_code, 1);
}

// A random tiny checkpoint emits byte tokens that form no UTF-8: the JSON line still prints.
TEST(CliTest, JsonOutputSurvivesTokensThatAreNotUtf8) {
  const char* source = std::getenv("GLIMPSE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ctest sets GLIMPSE_SOURCE_DIR";
  const CliRun run =
      Glimpse(std::string("generate --model ") + source +
              "/tests/fixtures/tiny/qwen3 --prompt-tokens 1,2,3 --max-tokens 8 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json line = nlohmann::json::parse(run.output.substr(run.output.find('{')));
  EXPECT_EQ(line["tokens"].size(), 8u);
}

// Qwen2's tiny checkpoint continues its golden prompt with an id of an embedding row past the
// tokenizer's vocabulary: the turn still reports every token, that one as U+FFFD in the text.
TEST(CliTest, JsonOutputKeepsTokensTheTokenizerCannotDecode) {
  const char* source = std::getenv("GLIMPSE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ctest sets GLIMPSE_SOURCE_DIR";
  const std::string dir = std::string(source) + "/tests/fixtures/tiny/qwen2";
  std::ifstream in(dir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::string prompt;
  for (const int32_t t : golden["token_ids"].get<std::vector<int32_t>>()) {
    if (!prompt.empty()) prompt += ',';
    prompt += std::to_string(t);
  }
  const auto greedy = golden["greedy"].get<std::vector<int32_t>>();
  const int32_t vocab = golden["tokenizer_vocab_size"].get<int32_t>();
  ASSERT_TRUE(std::any_of(greedy.begin(), greedy.end(), [&](int32_t t) { return t >= vocab; }));
  const CliRun run = Glimpse("generate --model " + dir + " --prompt-tokens " + prompt +
                             " --max-tokens " + std::to_string(greedy.size()) + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json line = nlohmann::json::parse(run.output.substr(run.output.find('{')));
  EXPECT_EQ(line["tokens"].get<std::vector<int32_t>>(), greedy);
  EXPECT_NE(line["text"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(CliTest, DeviceIsCpuOrCuda) {
  const CliRun bad = Glimpse("generate " + ModelFlag() + " --device tpu --prompt hi");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--device must be cpu or cuda"), std::string::npos) << bad.output;
  // On a GPU the turn runs there; elsewhere (CI) the CLI says why it cannot.
  const CliRun cuda = Glimpse("generate " + ModelFlag() +
                              " --device cuda --prompt-tokens 1,2,3 --max-tokens 2 --json");
  if (cuda.exit_code == 0) {
    const nlohmann::json line = nlohmann::json::parse(cuda.output.substr(cuda.output.find('{')));
    EXPECT_EQ(line["tokens"].size(), 2u) << cuda.output;
  } else {
    EXPECT_EQ(cuda.exit_code, 1);
    EXPECT_TRUE(cuda.output.find("no CUDA device") != std::string::npos ||
                cuda.output.find("no CUDA runtime") != std::string::npos)
        << cuda.output;
  }
}

TEST(CliTest, JsonOutputCarriesPromptAndGeneratedTokens) {
  const CliRun run = Glimpse("generate " + ModelFlag() +
                             " --prompt 'The capital of France is' --max-tokens 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string line = run.output.substr(run.output.find('{'));
  const auto doc = nlohmann::json::parse(line);
  EXPECT_EQ(doc["prompt_tokens"], (std::vector<int32_t>{504, 3575, 282, 4649, 314}));
  EXPECT_EQ(doc["tokens"].size(), 4u);
  EXPECT_EQ(doc["text"].get<std::string>().rfind(" Paris", 0), 0u) << doc["text"];
}

TEST(CliTest, ChatTurnsContinueTheSameSession) {
  const CliRun run =
      Glimpse("generate " + ModelFlag() + " --chat --json --max-tokens 8", "Hi\\nWhat is 2+2?\\n");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<nlohmann::json> turns;
  for (size_t at = 0; (at = run.output.find("{\"prompt_tokens\"", at)) != std::string::npos;) {
    const size_t end = run.output.find('\n', at);
    turns.push_back(nlohmann::json::parse(run.output.substr(at, end - at)));
    at = end;
  }
  ASSERT_EQ(turns.size(), 2u) << run.output;
  // The second turn feeds only the new tokens: the previous turn's last sampled token first.
  const auto& first_tokens = turns[0]["tokens"];
  const auto& second_prompt = turns[1]["prompt_tokens"];
  ASSERT_FALSE(second_prompt.empty());
  EXPECT_LT(second_prompt.size(), turns[0]["prompt_tokens"].size() + 8);
  if (first_tokens.size() == 8u) {
    EXPECT_EQ(second_prompt[0], first_tokens.back());
  }
}

// `glimpse up --etcd`: the coordinator's state in a local etcd member under the cluster's
// directory. A second `glimpse up` on the same directory starts that member again, with its data,
// and the coordinator restores the first run's session from it.
TEST(CliTest, UpWithEtcdKeepsTheCoordinatorsStateAcrossRuns) {
  const std::string dir = TempPath("up_etcd");
  std::filesystem::remove_all(dir);
  const std::string up = "up --etcd --chat --no-prefill-worker --max-tokens 4 --session s1 --dir " +
                         dir + " " + ModelFlag();
  for (int run = 0; run < 2; ++run) {
    const CliRun r = Glimpse(up, "Name a color.\\n");
    ASSERT_EQ(r.exit_code, 0) << "run " << run << ":\n" << r.output;
    EXPECT_NE(r.output.find("etcd: 127.0.0.1:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("[turn 1"), std::string::npos) << r.output;
  }
  std::ifstream log(dir + "/logs/coordinator.log");
  std::string line, restored;
  while (std::getline(log, line)) {
    if (line.find("coordinator state restored") != std::string::npos) restored = line;
  }
  EXPECT_NE(restored.find("\"sessions\":1"), std::string::npos) << restored;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace glimpse

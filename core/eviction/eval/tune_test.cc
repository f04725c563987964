#include "core/eviction/eval/tune.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/eviction/eval/calibration.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "zlib.h"

namespace glimpse::eviction::eval {
namespace {

TEST(TuneCandidatesTest, StartWithTheIncumbentAndAreDistinct) {
  const MethodSettings snap = *BuiltInSettings("snapkv");
  const std::vector<MethodSettings> stage1 = ScorerCandidates("snapkv", snap);
  // W 4 x (kernel 1, kernels 5 and 9 x pooling 2); the built-in is one of them
  ASSERT_EQ(stage1.size(), 20u);
  EXPECT_EQ(Describe(stage1.front()), Describe(snap));
  std::set<std::string> names;
  for (const MethodSettings& s : stage1) names.insert(Describe(s));
  EXPECT_EQ(names.size(), stage1.size());

  EXPECT_EQ(ScorerCandidates("streamingllm", *BuiltInSettings("streamingllm")).size(), 1u);
  // No window, pooling only: unpooled (the built-in), kernels 5 and 9 x pooling 2
  const std::vector<MethodSettings> pooled = ScorerCandidates("h2o", *BuiltInSettings("h2o"));
  ASSERT_EQ(pooled.size(), 5u);
  EXPECT_EQ(Describe(pooled.front()), Describe(*BuiltInSettings("h2o")));
  for (const MethodSettings& s : pooled) EXPECT_EQ(s.scorer.window, 0) << Describe(s);
  EXPECT_EQ(ScorerCandidates("cake", *BuiltInSettings("cake")).size(), 12u);  // avg only
  // LookaheadKV: h2o's five, and each window read beside its rows (kernel 1, 5 and 9 x 2): 5 + 4 x
  // 5
  const std::vector<MethodSettings> lookahead =
      ScorerCandidates("lookahead", *BuiltInSettings("lookahead"));
  ASSERT_EQ(lookahead.size(), 25u);
  EXPECT_EQ(lookahead.front().scorer.window, 0);
  EXPECT_EQ(lookahead.back().scorer.window, 64);

  MethodSettings winner = stage1[3];
  const std::vector<MethodSettings> stage2 = SelectionCandidates("snapkv", winner);
  EXPECT_EQ(Describe(stage2.front()), Describe(winner));
  EXPECT_EQ(stage2.size(), 8u);  // sinks 2 x granularity 2 x schedule 2; W is the scorer's
  const std::vector<MethodSettings> h2o = SelectionCandidates("h2o", *BuiltInSettings("h2o"));
  EXPECT_EQ(h2o.size(), 24u);                                                // and recent windows 3
  for (const MethodSettings& s : h2o) EXPECT_GE(s.sinks, 4) << Describe(s);  // the attention sink
  for (const MethodSettings& s : SelectionCandidates("pyramidkv", *BuiltInSettings("pyramidkv"))) {
    EXPECT_EQ(s.schedule, Schedule::kPyramid);
  }
  for (const MethodSettings& s : SelectionCandidates("cake", *BuiltInSettings("cake"))) {
    EXPECT_EQ(s.schedule, Schedule::kCake);
  }
}

class CalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/calibration_test";
    std::filesystem::create_directories(dir_);
    std::ofstream a(dir_ + "/a.txt");
    for (int i = 0; i < 400; ++i) {
      a << "Line " << i << " of the first text says that permission is granted to copy.";
      if (i == 200) a << " The Quartermaster alone keeps the ledger.";
      a << "\n";
    }
    std::ofstream(dir_ + "/short.txt") << "Too short.\n";
    std::filesystem::create_symlink(dir_ + "/a.txt", dir_ + "/link.txt");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CalibrationTest, ExcerptsOfFilesWithRotatingInstructionsDeterministically) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  CalibrationOptions options{.sources = {dir_}, .tasks = 3, .lengths = {512}};
  auto set = MakeCalibrationSet(model->tokenizer(), options);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->tasks.size(), 3u);
  ASSERT_EQ(set->provenance["sources"].size(), 2u);  // the link is not read twice
  for (size_t i = 0; i < set->tasks.size(); ++i) {
    const Task& t = set->tasks[i];
    EXPECT_EQ(t.kind, TaskKind::kCalibrationText);
    ASSERT_EQ(t.turns.size(), 1u);
    EXPECT_EQ(t.turns[0].answer, "");
    EXPECT_NE(t.context.find("of the first text"), std::string::npos);  // short.txt cannot fit
    const int64_t tokens = static_cast<int64_t>(model->tokenizer().Encode(t.context).size());
    EXPECT_GE(tokens, 512 - 64 - 20);
    EXPECT_LE(tokens, 512);
  }
  EXPECT_EQ(set->tasks[0].turns[0].question, "Summarise the text above in two sentences.");
  auto again = MakeCalibrationSet(model->tokenizer(), options);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < set->tasks.size(); ++i) {
    EXPECT_EQ(again->tasks[i].context, set->tasks[i].context);
    EXPECT_EQ(again->tasks[i].turns[0].question, set->tasks[i].turns[0].question);
  }
  options.lengths = {8192};
  EXPECT_EQ(MakeCalibrationSet(model->tokenizer(), options).status().code(),
            absl::StatusCode::kNotFound);
  options.sources = {dir_ + "/missing"};
  EXPECT_EQ(MakeCalibrationSet(model->tokenizer(), options).status().code(),
            absl::StatusCode::kNotFound);
}

// A text of `lines` lines, each naming `text` and a keyword of its own (so that every excerpt has
// words that occur once, for the instructions that name one).
std::string Lines(const std::string& text, int lines) {
  std::string out;
  for (int i = 0; i < lines; ++i) {
    std::string keyword = "Keyword";
    for (char digit : std::to_string(i)) keyword += static_cast<char>('a' + (digit - '0'));
    absl::StrAppend(&out, "Line ", i, " of ", text, " is about ", keyword, ".\n");
  }
  return out;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile out = gzopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
}

// Debian's manuals are gzip files beside images: a gzip file is read as its text, a directory's
// file that is not text passed over; named, it is refused, and a corrupt gzip file too.
TEST_F(CalibrationTest, ReadsGzipFilesAndPassesOverFilesThatAreNotText) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const std::string dir = dir_ + "/manuals";
  std::filesystem::create_directories(dir);
  const std::string text = Lines("the manual", 300);
  ASSERT_NO_FATAL_FAILURE(WriteGzip(dir + "/manual.info.gz", text));
  std::ofstream(dir + "/figure.png", std::ios::binary) << std::string("\x89PNG\r\n\x1a\n\0\0", 10);
  CalibrationOptions options{.sources = {dir}, .tasks = 2, .lengths = {512}};
  auto set = MakeCalibrationSet(model->tokenizer(), options);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->provenance["sources"].size(), 1u);
  EXPECT_EQ(set->provenance["sources"][0]["bytes"], text.size());
  for (const Task& t : set->tasks) EXPECT_NE(t.context.find("of the manual"), std::string::npos);

  options.sources = {dir + "/figure.png"};
  EXPECT_EQ(MakeCalibrationSet(model->tokenizer(), options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::string corrupt;
  {
    ASSERT_NO_FATAL_FAILURE(WriteGzip(dir + "/corrupt.gz", text));
    std::ifstream in(dir + "/corrupt.gz", std::ios::binary);
    corrupt.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(dir + "/truncated.gz", std::ios::binary) << corrupt.substr(0, corrupt.size() / 2);
  corrupt[corrupt.size() / 2] ^= 0x5a;
  std::ofstream(dir + "/corrupt.gz", std::ios::binary | std::ios::trunc) << corrupt;
  for (const std::string name : {"/corrupt.gz", "/truncated.gz"}) {
    options.sources = {dir + name};
    EXPECT_EQ(MakeCalibrationSet(model->tokenizer(), options).status().code(),
              absl::StatusCode::kDataLoss)
        << name;
  }
}

// Instructions rotate over tasks (i mod 3); with three sources each meets all three, not one.
TEST_F(CalibrationTest, EverySourceMeetsEveryInstruction) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  std::vector<std::string> sources;
  for (const std::string name : {"text A", "text B", "text C"}) {
    sources.push_back(dir_ + "/" + name + ".txt");
    std::ofstream(sources.back()) << Lines(name, 300);
  }
  auto set =
      MakeCalibrationSet(model->tokenizer(), {.sources = sources, .tasks = 9, .lengths = {512}});
  ASSERT_TRUE(set.ok()) << set.status();
  std::set<std::pair<std::string, std::string>> met;  // (text, the instruction's first word)
  for (const Task& t : set->tasks) {
    const std::string text = t.context.substr(t.context.find(" of text ") + 4, 6);
    met.insert({text, t.turns[0].question.substr(0, t.turns[0].question.find(' '))});
  }
  EXPECT_EQ(met.size(), 9u);
  for (const auto& [text, instruction] : met) {
    EXPECT_TRUE(instruction == "Summarise" || instruction == "Quote" || instruction == "What")
        << text << ": " << instruction;
  }
}

// A real, small tuning run: every candidate is measured, the winner is the best of stage 2, and
// nothing measures worse than the built-in settings.
TEST_F(CalibrationTest, TuneKeepsTheBestCandidateAndNeverLosesToTheBuiltIn) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  auto set =
      MakeCalibrationSet(model->tokenizer(), {.sources = {dir_}, .tasks = 1, .lengths = {400}});
  ASSERT_TRUE(set.ok()) << set.status();
  const TuneOptions options{.methods = {"streamingllm"}, .budgets = {0.3}, .answer_tokens = 8};
  int64_t last = 0, total = 0;
  auto tuned = Tune(*model, model::testing::SharedPool(), set->tasks, options,
                    [&](int64_t done, int64_t all) { last = done, total = all; });
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  ASSERT_EQ(tuned->size(), 1u);
  const MethodTuning& t = (*tuned)[0];
  EXPECT_EQ(last, total);
  EXPECT_EQ(t.candidates.size(), 1u + 24u);  // stage 1: the built-in; stage 2: 2 x 3 x 2 x 2
  EXPECT_EQ(Describe(t.built_in), Describe(*BuiltInSettings("streamingllm")));
  EXPECT_EQ(t.built_in_kl, t.candidates.front().kl);
  EXPECT_LE(t.tuned_kl, t.built_in_kl);
  for (size_t i = 1; i < t.candidates.size(); ++i) EXPECT_GE(t.candidates[i].kl, t.tuned_kl);
  EXPECT_GT(t.built_in_kl, 0.0);
  const EvictionProfile profile = ProfileOf(*tuned, model->fingerprint());
  EXPECT_EQ(Describe(*profile.For("streamingllm")), Describe(t.tuned));
  EXPECT_NE(TuneTable(*tuned).find("| streamingllm |"), std::string::npos);
  EXPECT_EQ(Tune(*model, model::testing::SharedPool(), {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glimpse::eviction::eval

// The long-generation family on the real default model: a budget that holds everything scores
// as the full cache (KL 0 up to float rounding, every step agreeing, the same answer and peak), a
// small one stays within budget + interval entries per head, and tasks it cannot run are refused.
#include "core/eviction/eval/long_generation.h"

#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::eviction::eval {
namespace {

class LongGenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    auto settings = BuiltInSettings("streamingllm");
    ASSERT_TRUE(settings.ok());
    options_.arms = {Arm{.label = "streamingllm", .settings = *settings}};
    options_.budgets = {40, 4096};
    options_.interval = 8;
    options_.trace_tokens = 40;
    options_.max_answer_tokens = 8;
    options_.arms[0].settings.recent_window = 8;
  }
  const model::Model* model_ = nullptr;
  LongGenerationOptions options_;
};

TEST_F(LongGenerationTest, AFullBudgetScoresAsTheFullCacheAndASmallOneStaysBounded) {
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 7, 256);
  auto scores = RunLongGenerationTask(*model_, model::testing::SharedPool(), task, options_);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->runs.size(), 2u);
  EXPECT_GT(scores->trace_tokens, 0);
  EXPECT_EQ(scores->full_peak_entries, scores->prompt_tokens + scores->trace_tokens);
  const LongGenerationRun& small = scores->runs[0];
  const LongGenerationRun& all = scores->runs[1];
  EXPECT_LT(all.kl, 1e-6);  // the reference's log-probabilities are kept as floats
  EXPECT_EQ(all.agreement, 1.0);
  EXPECT_EQ(all.answer, scores->full_answer);
  EXPECT_EQ(all.correct, scores->full_correct);
  EXPECT_EQ(all.recall_answer, scores->full_answer);  // nothing was evicted to recall
  EXPECT_EQ(all.peak_entries, scores->full_peak_entries);
  EXPECT_EQ(all.evictions, 0);
  EXPECT_GT(small.evictions, 0);
  EXPECT_LE(small.peak_entries, 40 + options_.interval);
  EXPECT_GT(small.kl, 0.0);
  const std::string report = LongGenerationReport({*scores}, options_);
  EXPECT_NE(report.find("| streamingllm | 40 |"), std::string::npos) << report;
}

TEST_F(LongGenerationTest, H2oRunsWithoutTheRecallTurnItCannotDo) {
  auto h2o = BuiltInSettings("h2o");
  ASSERT_TRUE(h2o.ok());
  h2o->recent_window = 8;
  options_.arms = {Arm{.label = "h2o", .settings = *h2o}};
  options_.budgets = {40};
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 7, 256);
  auto scores = RunLongGenerationTask(*model_, model::testing::SharedPool(), task, options_);
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_GT(scores->runs[0].evictions, 0);
  EXPECT_FALSE(scores->runs[0].recall_run);
  EXPECT_NE(LongGenerationReport({*scores}, options_).find("| h2o | 40 |"), std::string::npos);
}

TEST_F(LongGenerationTest, RefusesTwoTurnTasksAndMethodsThatCannotEvictDuringDecoding) {
  const Task two_turn = GenerateTask(TaskKind::kTwoTurnQa, 7, 256);
  EXPECT_EQ(RunLongGenerationTask(*model_, model::testing::SharedPool(), two_turn, options_)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto expected_attention = BuiltInSettings("expected_attention");
  ASSERT_TRUE(expected_attention.ok());
  options_.arms = {Arm{.label = "expected_attention", .settings = *expected_attention}};
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 7, 256);
  EXPECT_EQ(
      RunLongGenerationTask(*model_, model::testing::SharedPool(), task, options_).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace glimpse::eviction::eval

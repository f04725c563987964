// Metrics on hand-made inputs.
#include "core/eviction/eval/metrics.h"

#include <cmath>

#include "gtest/gtest.h"

namespace glimpse::eviction::eval {
namespace {

TEST(MetricsTest, AnswerMatchesWholeNumbersOnly) {
  EXPECT_TRUE(AnswerMatches("The secret code for the red door is 4721.", "4721"));
  EXPECT_TRUE(AnswerMatches("4721", "4721"));
  EXPECT_TRUE(AnswerMatches("14721 or 4721", "4721"));  // the second occurrence stands alone
  EXPECT_FALSE(AnswerMatches("The code is 47210.", "4721"));
  EXPECT_FALSE(AnswerMatches("The code is 14721.", "4721"));
  EXPECT_FALSE(AnswerMatches("The code is 47 21.", "4721"));
  EXPECT_FALSE(AnswerMatches("", "4721"));
  EXPECT_FALSE(AnswerMatches("anything", ""));
}

TEST(MetricsTest, AnswerMatchesWholeWordsWithoutCase) {
  EXPECT_TRUE(AnswerMatches("That was Mark Twain.", "Twain"));
  EXPECT_TRUE(AnswerMatches("TWAIN's line", "Twain"));
  EXPECT_TRUE(AnswerMatches("the word is quagga", "quagga"));
  EXPECT_FALSE(AnswerMatches("Twains", "Twain"));
  EXPECT_FALSE(AnswerMatches("a quaggas herd", "quagga"));
  EXPECT_FALSE(AnswerMatches("equagga", "quagga"));
  EXPECT_TRUE(AnswerMatches("quagga2", "quagga"));  // a digit does not continue a word
}

TEST(MetricsTest, GreedyAgreementCountsPositions) {
  const std::vector<int32_t> ref = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(GreedyAgreement(ref, ref, 10), 1.0);
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{1, 2, 9, 4}, ref, 10), 0.75);
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{1, 2}, ref, 10), 0.5);  // missing = wrong
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{1, 9, 3, 4, 5}, ref, 2), 0.5);  // first 2
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{}, ref, 10), 0.0);
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{5}, std::vector<int32_t>{}, 10), 1.0);
  // Shifted by one token: nothing agrees position by position.
  EXPECT_DOUBLE_EQ(GreedyAgreement(std::vector<int32_t>{0, 1, 2, 3}, ref, 10), 0.0);
}

TEST(MetricsTest, KlOfIdenticalDistributionsIsZero) {
  const std::vector<float> logits = {0.5f, -1.0f, 3.0f, 2.0f, -7.5f};
  const std::vector<double> p = LogSoftmax(logits);
  EXPECT_EQ(KlDivergence(p, p), 0.0);
  // Shifting logits by a constant leaves the distribution unchanged.
  std::vector<float> shifted = logits;
  for (float& l : shifted) l += 10.0f;
  EXPECT_NEAR(KlDivergence(p, LogSoftmax(shifted)), 0.0, 1e-12);
}

TEST(MetricsTest, KlMatchesHandComputedValue) {
  // P = (1/2, 1/2), Q = (1/4, 3/4): KL = ½ ln 2 + ½ ln(2/3).
  const std::vector<double> p = {std::log(0.5), std::log(0.5)};
  const std::vector<double> q = {std::log(0.25), std::log(0.75)};
  EXPECT_NEAR(KlDivergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-12);
  EXPECT_GT(KlDivergence(q, p), 0.0);
  // LogSoftmax is normalised.
  const std::vector<double> l = LogSoftmax(std::vector<float>{1.0f, 2.0f, 3.0f});
  EXPECT_NEAR(std::exp(l[0]) + std::exp(l[1]) + std::exp(l[2]), 1.0, 1e-12);
  EXPECT_NEAR(l[2] - l[1], 1.0, 1e-12);
}

TEST(MetricsTest, ArgmaxTakesLowestIdOnTies) {
  EXPECT_EQ(Argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-1.0f}), 0);
}

}  // namespace
}  // namespace glimpse::eviction::eval

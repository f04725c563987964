#include "core/model/sampler.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f};

TEST(SamplerTest, GreedyPicksArgmaxWithLowestIdOnTies) {
  auto sampler = Sampler::Create({});
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(sampler->Sample(kLogits), 1);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  auto sampler = Sampler::Create({.temperature = 5.0f, .top_k = 1, .seed = 3});
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler->Sample(kLogits), 1);
}

TEST(SamplerTest, TopKRestrictsToTheKBest) {
  auto sampler = Sampler::Create({.temperature = 10.0f, .top_k = 3, .seed = 1});
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 200; ++i) {
    const int32_t t = sampler->Sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 2 || t == 3) << t;
  }
}

TEST(SamplerTest, TinyTopPKeepsOnlyTheMostLikely) {
  auto sampler = Sampler::Create({.temperature = 1.0f, .top_p = 0.01f, .seed = 9});
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sampler->Sample(kLogits), 1);
}

TEST(SamplerTest, SameSeedSameSequenceAndFrequenciesFollowSoftmax) {
  const SamplingOptions options{.temperature = 1.0f, .seed = 42};
  auto a = Sampler::Create(options), b = Sampler::Create(options);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  int ones = 0;
  constexpr int kDraws = 4000;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t t = a->Sample(logits);
    EXPECT_EQ(t, b->Sample(logits));
    ones += t;
  }
  // 4000 draws: standard deviation of the count is ~27, so ±200 cannot fail by chance.
  EXPECT_NEAR(ones, 3000, 200);
}

TEST(SamplerTest, RejectsInvalidOptions) {
  EXPECT_FALSE(Sampler::Create({.temperature = -1.0f}).ok());
  EXPECT_FALSE(Sampler::Create({.top_k = -2}).ok());
  EXPECT_FALSE(Sampler::Create({.top_p = 0.0f}).ok());
  EXPECT_FALSE(Sampler::Create({.top_p = 1.5f}).ok());
  const auto status = Sampler::Create({.temperature = -1.0f}).status();
  EXPECT_NE(status.message().find("got -1"), std::string::npos) << status;
}

}  // namespace
}  // namespace glimpse::model

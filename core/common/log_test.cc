#include "core/common/log.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse::log {
namespace {

TEST(LogTest, WritesOneJsonObjectPerLine) {
  testing::internal::CaptureStderr();
  Info("model loaded", {{"tensors", 272LL}, {"path", std::string("/m.gguf")}});
  const std::string out = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  const auto line = nlohmann::json::parse(out);
  EXPECT_EQ(line["msg"], "model loaded");
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["tensors"], 272);
  EXPECT_EQ(line["path"], "/m.gguf");
}

TEST(LogTest, DropsLinesBelowMinLevel) {
  SetMinLevel(Level::kError);
  testing::internal::CaptureStderr();
  Warning("ignored");
  EXPECT_TRUE(testing::internal::GetCapturedStderr().empty());
  SetMinLevel(Level::kInfo);
}

}  // namespace
}  // namespace glimpse::log

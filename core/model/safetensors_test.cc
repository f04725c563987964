#include "core/model/safetensors.h"

#include <cstring>

#include "core/model/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

using kernels::DType;
using ::testing::HasSubstr;
using testing::SafetensorsBuilder;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const std::string& bytes) {
  return SafetensorsFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

SafetensorsBuilder Small() {
  SafetensorsBuilder b;
  b.Add("a.weight", DType::kF32, {2, 3}, 1)
      .Add("b.weight", DType::kBF16, {4}, 2)
      .Add("c.weight", DType::kF16, {3, 1}, 3)
      .SetMetadata("format", "pt");
  return b;
}

// A one-tensor file whose header entry is `entry` and whose data section holds `data_bytes`.
std::string WithEntry(const std::string& entry, size_t data_bytes = 8) {
  SafetensorsBuilder b;
  b.SetRawHeader("{\"t\":" + entry + "}").Add("t", "F32", {}, std::string(data_bytes, '\0'));
  return b.Build();
}

TEST(SafetensorsTest, ParsesTensorsAndMetadata) {
  const std::string bytes = Small().Build();
  auto file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  ASSERT_EQ(f.tensors().size(), 3u);
  const SafetensorsTensor* a = f.FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->bytes, 24u);
  EXPECT_EQ(std::memcmp(a->data, testing::RandomTensorBytes(DType::kF32, {2, 3}, 1).data(), 24), 0);
  const SafetensorsTensor* b = f.FindTensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::kBF16);
  EXPECT_EQ(b->bytes, 8u);
  EXPECT_EQ(f.FindTensor("c.weight")->type, DType::kF16);
  EXPECT_EQ(f.FindTensor("absent"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(SafetensorsTest, AcceptsScalarsAndEmptyTensors) {
  SafetensorsBuilder b;
  b.Add("scalar", "F32", {}, std::string(4, '\0')).Add("empty", "F16", {0, 7}, "");
  auto f = Parse(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->FindTensor("scalar")->bytes, 4u);
  EXPECT_EQ((*f)->FindTensor("empty")->bytes, 0u);
}

TEST(SafetensorsTest, EveryTruncationIsAnError) {
  const std::string bytes = Small().Build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(Parse(bytes.substr(0, n)).ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(SafetensorsTest, SingleByteCorruptionNeverCrashes) {
  const std::string bytes = Small().Build();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t x : {0x01, 0x20, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ x);
      (void)Parse(bad);
    }
  }
}

TEST(SafetensorsTest, RejectsBadHeaderLength) {
  std::string bytes = Small().Build();
  const uint64_t huge = ~uint64_t{0};
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_EQ(Parse(bytes).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Parse("abc").status().message(), HasSubstr("too short"));
}

TEST(SafetensorsTest, RejectsBadJson) {
  for (const char* header : {"{", "[1, 2]", "\"x\"", "{\"t\": }", "{\"a\":1}{"}) {
    SafetensorsBuilder b;
    b.SetRawHeader(header);
    absl::Status s = Parse(b.Build()).status();
    EXPECT_FALSE(s.ok()) << header;
  }
  SafetensorsBuilder b;
  b.SetRawHeader("{\"__metadata__\": {\"k\": 3}}");
  EXPECT_THAT(Parse(b.Build()).status().message(), HasSubstr("__metadata__ key 'k'"));
}

TEST(SafetensorsTest, RejectsBadEntries) {
  struct Case {
    std::string entry;
    std::string message;
  };
  const Case cases[] = {
      {"3", "not an object"},
      {R"({"dtype":"F32","shape":[2]})", "lacks one of"},
      {R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})", "unsupported dtype 'I64'"},
      {R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})", "dtype is not a string"},
      {R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", "shape holds -2"},
      {R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})", "shape holds 2.5"},
      {R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})", "shape is not an array"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,9]})", "has 3 elements"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", "do not lie inside"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})", "do not lie inside"},
      {R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", "needs 12 bytes"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})", "overflows"},
      {R"({"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]})", "shape holds"},
  };
  for (const Case& c : cases) {
    absl::Status s = Parse(WithEntry(c.entry)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.entry;
    EXPECT_THAT(s.message(), HasSubstr("tensor 't'")) << c.entry;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.entry;
  }
}

TEST(SafetensorsTest, RejectsOverlap) {
  SafetensorsBuilder b;
  b.SetRawHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})")
      .Add("pad", "F32", {3}, std::string(12, '\0'));
  absl::Status s = Parse(b.Build()).status();
  EXPECT_THAT(s.message(), HasSubstr("'x' [0, 8) and 'y' [4, 12) overlap"));
}

TEST(SafetensorsTest, OpenMapsAFile) {
  const std::string dir = testing::MakeTempDir("safetensors_test");
  testing::WriteFile(dir + "/m.safetensors", Small().Build());
  auto f = SafetensorsFile::Open(dir + "/m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);
  auto missing = SafetensorsFile::Open(dir + "/absent.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace glimpse::model

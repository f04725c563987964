#include "core/model/gguf.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/model/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

using kernels::DType;
using testing::GgufBuilder;
using testing::GgufImage;
using ::testing::HasSubstr;

GgufBuilder SmallBuilder(uint32_t version = 3) {
  GgufBuilder b(version);
  b.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 30)
      .SetI32("test.negative", -7)
      .SetU64("test.big", 1ull << 40)
      .SetF32("test.float", 0.5f)
      .SetBool("test.flag", true)
      .SetStringArray("tokenizer.ggml.tokens", {"a", "bc", ""})
      .SetI32Array("tokenizer.ggml.token_type", {1, -2, 3})
      .SetF32Array("tokenizer.ggml.scores", {0.25f, -1.0f})
      .AddTensor("norm.weight", DType::kF32, {8}, 1)
      .AddTensor("embd.weight", DType::kQ8_0, {32, 3}, 2)
      .AddTensor("proj.weight", DType::kQ4_1, {64, 2}, 3);
  return b;
}

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const std::string& bytes) {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

template <typename T>
void Poke(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

// Offsets inside a tensor info record whose name has `name_len` bytes and `n_dims` dims.
size_t DimsPos(size_t info, size_t name_len) { return info + 8 + name_len + 4; }
size_t TypePos(size_t info, size_t name_len, size_t n_dims) {
  return DimsPos(info, name_len) + 8 * n_dims;
}
size_t OffsetPos(size_t info, size_t name_len, size_t n_dims) {
  return TypePos(info, name_len, n_dims) + 4;
}

TEST(GgufTest, ParsesMetadataAndTensors) {
  GgufImage img = SmallBuilder().Build();
  auto file = GgufFile::Parse(img.data(), img.size());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint("llama.block_count"), 30u);
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("test.negative"), -7);
  EXPECT_EQ(*f.GetUint("test.big"), 1ull << 40);
  EXPECT_DOUBLE_EQ(*f.GetFloat("test.float"), 0.5);
  EXPECT_DOUBLE_EQ(*f.GetFloat("llama.block_count"), 30.0);
  EXPECT_TRUE(*f.GetBool("test.flag"));
  EXPECT_EQ(*f.GetStringArray("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(*f.GetIntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetFloatArray("tokenizer.ggml.scores"), (std::vector<double>{0.25, -1.0}));
  EXPECT_TRUE(f.HasKey("test.flag"));
  EXPECT_FALSE(f.HasKey("test.absent"));

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor* embd = f.FindTensor("embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, DType::kQ8_0);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{32, 3}));
  EXPECT_EQ(embd->bytes, 3u * 34);
  EXPECT_EQ(std::memcmp(embd->data, testing::RandomTensorBytes(DType::kQ8_0, {32, 3}, 2).data(),
                        embd->bytes),
            0);
  const GgufTensor* proj = f.FindTensor("proj.weight");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->bytes, 2u * 2 * 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(proj->data) % 32, 0u);  // default alignment
  EXPECT_EQ(f.FindTensor("absent"), nullptr);
}

TEST(GgufTest, AccessorsReportMissingKeysAndWrongTypes) {
  GgufImage img = SmallBuilder().Build();
  auto file = GgufFile::Parse(img.data(), img.size());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.GetUint("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.GetUint("nope").status().message(), HasSubstr("'nope'"));
  absl::Status s = f.GetString("llama.block_count").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'llama.block_count'"));
  EXPECT_THAT(s.message(), HasSubstr("unsigned integer"));
  EXPECT_FALSE(f.GetUint("test.negative").ok());
  EXPECT_FALSE(f.GetBool("test.float").ok());
  EXPECT_FALSE(f.GetIntArray("tokenizer.ggml.tokens").ok());
  EXPECT_FALSE(f.GetStringArray("general.architecture").ok());
  // Integer arrays read as floats.
  EXPECT_EQ(*f.GetFloatArray("tokenizer.ggml.token_type"), (std::vector<double>{1, -2, 3}));
}

TEST(GgufTest, AcceptsVersion2AndCustomAlignment) {
  GgufImage v2 = SmallBuilder(2).Build();
  auto f2 = GgufFile::Parse(v2.data(), v2.size());
  ASSERT_TRUE(f2.ok()) << f2.status();
  EXPECT_EQ((*f2)->version(), 2u);

  GgufBuilder b(3, 64);
  b.AddTensor("a", DType::kF32, {3}).AddTensor("b", DType::kF16, {5});
  GgufImage img = b.Build();
  auto f = GgufFile::Parse(img.data(), img.size());
  ASSERT_TRUE(f.ok()) << f.status();
  const uint8_t* first = static_cast<const uint8_t*>((*f)->FindTensor("a")->data);
  const uint8_t* second = static_cast<const uint8_t*>((*f)->FindTensor("b")->data);
  EXPECT_EQ(second - first, 64);
}

TEST(GgufTest, EmptyFileWithoutTensorsIsValid) {
  GgufImage img = GgufBuilder().Build();
  auto f = GgufFile::Parse(img.data(), img.size());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufTest, RejectsBadMagicAndVersion) {
  std::string bytes = SmallBuilder().Build().bytes;
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("not a GGUF file"));
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    bad = bytes;
    Poke<uint32_t>(bad, 4, version);
    absl::Status s = Parse(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("unsupported GGUF version " + std::to_string(version)));
  }
}

// Every strict prefix of a valid file is an error, never a crash (ASan builds check the reads).
TEST(GgufTest, EveryTruncationIsAnError) {
  GgufImage img = SmallBuilder().Build();
  ASSERT_TRUE(GgufFile::Parse(img.data(), img.size()).ok());
  for (size_t n = 0; n < img.size(); ++n) {
    auto f = GgufFile::Parse(img.data(), n);
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
  }
}

// Flipping any byte may or may not leave a valid file, but must never crash.
TEST(GgufTest, SingleByteCorruptionNeverCrashes) {
  const std::string bytes = SmallBuilder().Build().bytes;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ x);
      (void)Parse(bad);
    }
  }
}

TEST(GgufTest, RejectsHugeCounts) {
  const std::string bytes = SmallBuilder().Build().bytes;
  std::string bad = bytes;
  Poke<uint64_t>(bad, 16, uint64_t{1} << 62);
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("metadata count"));
  bad = bytes;
  Poke<uint64_t>(bad, 8, ~uint64_t{0});
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("tensor count"));
  // One more key than written: the parser reads tensor infos as a key and fails cleanly.
  bad = bytes;
  Poke<uint64_t>(bad, 16, 10);
  EXPECT_FALSE(Parse(bad).ok());
}

TEST(GgufTest, RejectsBadStringLength) {
  GgufImage img = SmallBuilder().Build();
  std::string bad = img.bytes;
  Poke<uint64_t>(bad, img.metadata_start, uint64_t{1} << 63);
  absl::Status s = Parse(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("metadata key"));
  EXPECT_THAT(s.message(), HasSubstr("offset 24"));
}

TEST(GgufTest, RejectsBadMetadataValues) {
  struct Case {
    uint32_t type;
    std::string value;
    std::string message;
  };
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<char*>(&v), 4); };
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); };
  const Case cases[] = {
      {13, u32(0), "unknown value type 13"},
      {7, std::string(1, '\x02'), "must be 0 or 1"},
      {9, u32(9) + u64(1) + u32(4) + u64(0), "nested array"},
      {9, u32(77) + u64(1), "unknown element type 77"},
      {9, u32(4) + u64(uint64_t{1} << 60), "elements of type u32"},
      {9, u32(10) + u64(1) + u64(~uint64_t{0}), "does not fit int64"},
      {8, u64(1000) + "abc", "length 1000"},
  };
  for (const Case& c : cases) {
    GgufBuilder b;
    b.SetString("ok", "fine").SetRaw("bad.key", c.type, c.value);
    GgufImage img = b.Build();
    absl::Status s = GgufFile::Parse(img.data(), img.size()).status();
    EXPECT_FALSE(s.ok()) << c.message;
    EXPECT_THAT(s.message(), HasSubstr("'bad.key'"));
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(GgufTest, RejectsDuplicates) {
  GgufBuilder keys;
  keys.SetU32("k", 1).SetU32("k", 2);
  GgufImage img = keys.Build();
  EXPECT_THAT(GgufFile::Parse(img.data(), img.size()).status().message(),
              HasSubstr("duplicate metadata key 'k'"));
  GgufBuilder tensors;
  tensors.AddTensor("t", DType::kF32, {4}).AddTensor("t", DType::kF32, {4});
  img = tensors.Build();
  EXPECT_THAT(GgufFile::Parse(img.data(), img.size()).status().message(),
              HasSubstr("duplicate tensor name 't'"));
}

// K-quant tensors (what Q4_K_M / Q5_K_M / Q6_K files hold) load; a row must be whole
// 256-element super-blocks.
TEST(GgufTest, KQuantTensorsLoadInWholeSuperBlocks) {
  GgufBuilder b;
  b.AddTensor("a.weight", DType::kQ4_K, {512, 3})
      .AddTensor("b.weight", DType::kQ5_K, {256, 2})
      .AddTensor("c.weight", DType::kQ6_K, {768, 1});
  GgufImage img = b.Build();
  auto f = GgufFile::Parse(img.data(), img.size());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->FindTensor("a.weight")->bytes, 3u * 2 * 144);
  EXPECT_EQ((*f)->FindTensor("b.weight")->bytes, 2u * 176);
  EXPECT_EQ((*f)->FindTensor("c.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->FindTensor("c.weight")->bytes, 3u * 210);
  GgufBuilder partial;
  partial.AddTensor("d.weight", /*Q6_K=*/14u, {576, 1}, std::string(3 * 210, '\0'));
  img = partial.Build();
  EXPECT_THAT(GgufFile::Parse(img.data(), img.size()).status().message(),
              HasSubstr("ne[0] = 576 is not a multiple of Q6_K's block size 256"));
}

TEST(GgufTest, UnsupportedTensorTypeNamesTheTypeId) {
  GgufBuilder b;
  b.AddTensor("blk.0.attn_q.weight", /*Q5_0=*/6u, {256, 2}, std::string(2 * 8 * 22, '\0'));
  GgufImage img = b.Build();
  absl::Status s = GgufFile::Parse(img.data(), img.size()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'blk.0.attn_q.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("unsupported tensor type 6"));
}

TEST(GgufTest, RejectsBadShapes) {
  struct Case {
    DType type;
    std::vector<int64_t> dims;
    std::string message;
  };
  const Case cases[] = {
      {DType::kF32, {}, "rank 0"},
      {DType::kF32, {1, 1, 1, 1, 1}, "rank 5"},
      {DType::kF32, {4, 0}, "dimension 1 is 0"},
      {DType::kF32, {-1}, "dimension 0 is 18446744073709551615"},
      {DType::kQ8_0, {48}, "not a multiple of Q8_0's block size 32"},
      {DType::kF32, {4, 1ll << 40}, "more bytes than"},
      {DType::kF32, {4, 1ll << 32, 1ll << 32, 1ll << 32}, "more bytes than"},  // overflows u64
      {DType::kF32, {1ll << 40, 1}, "larger than the file"},
      {DType::kQ4_0, {int64_t{1} << 62}, "larger than the file"},
  };
  for (const Case& c : cases) {
    GgufBuilder b;
    b.AddTensor("t", static_cast<uint32_t>(c.type), c.dims, std::string(64, '\0'));
    GgufImage img = b.Build();
    absl::Status s = GgufFile::Parse(img.data(), img.size()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr("tensor 't'"));
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(GgufTest, RejectsBadAlignment) {
  for (uint32_t alignment : {0u, 48u}) {
    GgufBuilder b(3, alignment == 0 ? 32 : 64);
    if (alignment == 0) b.SetU32("general.alignment", 0);
    b.AddTensor("t", DType::kF32, {4});
    GgufImage img = b.Build();
    if (alignment == 48) Poke<uint32_t>(img.bytes, img.bytes.find("general.alignment") + 21, 48);
    absl::Status s = GgufFile::Parse(img.data(), img.size()).status();
    EXPECT_THAT(s.message(), HasSubstr("general.alignment = " + std::to_string(alignment)));
  }
  GgufBuilder typed;
  typed.SetString("general.alignment", "32");
  GgufImage img = typed.Build();
  EXPECT_THAT(GgufFile::Parse(img.data(), img.size()).status().message(),
              HasSubstr("'general.alignment' holds a string"));
}

TEST(GgufTest, RejectsBadTensorOffsets) {
  GgufImage img = SmallBuilder().Build();
  // Tensors: norm.weight (rank 1), embd.weight (rank 2), proj.weight (rank 2).
  const size_t embd_offset = OffsetPos(img.tensor_info_offsets[1], 11, 2);
  const size_t proj_offset = OffsetPos(img.tensor_info_offsets[2], 11, 2);

  std::string bad = img.bytes;
  Poke<uint64_t>(bad, embd_offset, 33);
  EXPECT_THAT(Parse(bad).status().message(),
              HasSubstr("tensor 'embd.weight': offset 33 is not a multiple of the alignment 32"));

  bad = img.bytes;
  Poke<uint64_t>(bad, proj_offset, uint64_t{1} << 40);
  absl::Status s = Parse(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'proj.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("offset 1099511627776"));

  bad = img.bytes;
  Poke<uint64_t>(bad, proj_offset, ~uint64_t{0} - 31);  // aligned, and offset + bytes overflows
  EXPECT_EQ(Parse(bad).status().code(), absl::StatusCode::kDataLoss);

  bad = img.bytes;
  Poke<uint64_t>(bad, proj_offset, 32);  // inside embd.weight's bytes
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("overlap"));
}

TEST(GgufTest, RejectsCorruptedTensorInfoFields) {
  GgufImage img = SmallBuilder().Build();
  const size_t info = img.tensor_info_offsets[1];  // embd.weight, rank 2
  std::string bad = img.bytes;
  Poke<uint32_t>(bad, info + 8 + 11, 9);  // rank 9
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("rank 9"));
  bad = img.bytes;
  Poke<uint32_t>(bad, TypePos(info, 11, 2), 1000);
  EXPECT_THAT(Parse(bad).status().message(), HasSubstr("unsupported tensor type 1000"));
  bad = img.bytes;
  Poke<uint64_t>(bad, DimsPos(info, 11) + 8, 1000);  // rows: data no longer fits
  EXPECT_FALSE(Parse(bad).ok());
  bad = img.bytes;
  Poke<uint64_t>(bad, info, 0);  // empty name
  EXPECT_FALSE(Parse(bad).ok());
}

TEST(GgufTest, OpenMapsAFile) {
  const std::string dir = testing::MakeTempDir("gguf_test");
  const std::string path = dir + "/small.gguf";
  testing::WriteFile(path, SmallBuilder().Build().bytes);
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);

  auto missing = GgufFile::Open(dir + "/absent.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("absent.gguf"));
  EXPECT_EQ(GgufFile::Open(dir).status().code(), absl::StatusCode::kInvalidArgument);

  testing::WriteFile(dir + "/empty.gguf", "");
  auto empty = GgufFile::Open(dir + "/empty.gguf");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(empty.status().message(), HasSubstr("empty.gguf"));
}

// The fuzzer's seed corpus (tests/fixtures/fuzz) must stay a valid file, or fuzzing starts from
// the rejection paths only.
TEST(GgufTest, FuzzSeedIsValid) {
  const char* root = std::getenv("GLIMPSE_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "GLIMPSE_SOURCE_DIR is not set (ctest sets it)";
  auto f = GgufFile::Open(std::string(root) + "/tests/fixtures/fuzz/gguf_seed.gguf.bin");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->tensors().empty());
}

}  // namespace
}  // namespace glimpse::model

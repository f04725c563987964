// Page tests: round trips of every codec over odd shapes, header fields, the summary bound, and
// the decoder's validation — every truncation, every flipped byte, wrong version / codec /
// fingerprint, insane positions behind a valid CRC, too-small output buffers.
#include "core/kvpage/page.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/kvpage/crc32c.h"
#include "gtest/gtest.h"

namespace glimpse::kvpage {
namespace {

constexpr Fingerprint kModel = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
constexpr StateKey kState = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 0x42};

// Owns the arrays a PageView points at.
struct TestPage {
  std::vector<float> keys, values;
  std::vector<int32_t> positions;
  PageView view;

  TestPage(int64_t n, int64_t hd, uint32_t seed) : keys(n * hd), values(n * hd), positions(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& k : keys) k = normal(rng);
    for (float& v : values) v = normal(rng);
    int32_t p = static_cast<int32_t>(rng() % 5);
    for (int32_t& pos : positions) pos = (p += 1 + static_cast<int32_t>(rng() % 3));  // gaps
    view = {3, 5, n, hd, keys.data(), values.data(), positions.data(), kModel, kState};
  }
};

std::vector<uint8_t> Encode(const PageView& view, Codec codec, const EncodeOptions& opts = {}) {
  auto size = EncodedSize(view, codec, opts);
  EXPECT_TRUE(size.ok()) << size.status();
  std::vector<uint8_t> buf(*size);
  auto written = EncodePage(view, codec, buf, opts);
  EXPECT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, buf.size());
  return buf;
}

// Rewrites the CRC after a deliberate edit, so that checks behind the CRC are reached.
void FixCrc(std::vector<uint8_t>& page) {
  uint32_t crc = Crc32cExtend(0, page.data(), 60);
  crc = Crc32cExtend(crc, page.data() + 64, page.size() - 64);
  std::memcpy(page.data() + 60, &crc, 4);
}

TEST(PageTest, RoundTripEveryCodecAndShape) {
  for (const CodecInfo& codec : AllCodecs()) {
    for (int64_t n : {1, 3, 31, 64}) {
      for (int64_t hd : {64, 128}) {
        for (SummaryType summary : {SummaryType::kFp16, SummaryType::kFp32}) {
          SCOPED_TRACE(testing::Message() << codec.name << " n=" << n << " hd=" << hd);
          TestPage tp(n, hd, static_cast<uint32_t>(n * hd));
          const int64_t residual = codec.supports_residual ? KiviResidualRows(0, n, n + 20) : 0;
          const EncodeOptions opts{summary, residual};
          const std::vector<uint8_t> buf = Encode(tp.view, codec.id, opts);
          auto page = DecodePage(buf, {.expected_model = kModel});
          ASSERT_TRUE(page.ok()) << page.status();
          const PageHeader& h = page->header;
          EXPECT_EQ(h.format_version, kPageFormatVersion);
          EXPECT_EQ(h.codec, codec.id);
          EXPECT_EQ(h.summary, summary);
          EXPECT_EQ(h.n_tokens, n);
          EXPECT_EQ(h.head_dim, hd);
          EXPECT_EQ(h.residual_rows, opts.residual_rows);
          EXPECT_EQ(h.layer, 3u);
          EXPECT_EQ(h.kv_head, 5u);
          EXPECT_EQ(h.model, kModel);
          EXPECT_EQ(h.state_key, kState);
          EXPECT_EQ(h.total_bytes(), buf.size());
          EXPECT_EQ(page->positions, tp.positions);
          // Decoded tensors equal the codec's own decode of its section.
          std::vector<float> k(n * hd), v(n * hd);
          const size_t keys_at = buf.size() -
                                 codec.section_bytes(Role::kValues, n, hd, opts.residual_rows) -
                                 codec.section_bytes(Role::kKeys, n, hd, opts.residual_rows);
          codec.decode(Role::kKeys, buf.data() + keys_at, n, hd, opts.residual_rows, k.data());
          EXPECT_EQ(page->keys, k);
          EXPECT_EQ(page->values.size(), size_t(n * hd));
          // The summary bounds every original key, and is exact when fp32.
          for (int64_t c = 0; c < hd; ++c) {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t t = 0; t < n; ++t) {
              lo = std::fmin(lo, tp.keys[t * hd + c]), hi = std::fmax(hi, tp.keys[t * hd + c]);
            }
            EXPECT_LE(page->key_min[c], lo);
            EXPECT_GE(page->key_max[c], hi);
            if (summary == SummaryType::kFp32) {
              EXPECT_EQ(page->key_min[c], lo);
              EXPECT_EQ(page->key_max[c], hi);
            }
            EXPECT_LE(hi - page->key_max[c], 0.0f);
            EXPECT_LE(page->key_max[c] - hi, std::fabs(hi) * 0x1p-10 + 0x1p-24);
          }
        }
      }
    }
  }
}

TEST(PageTest, EveryTruncationAndEveryFlippedByteIsAnError) {
  for (Codec codec : {Codec::kFp16, Codec::kKivi2, Codec::kFp8E4M3}) {
    TestPage tp(3, 64, 9);
    const std::vector<uint8_t> good =
        Encode(tp.view, codec, {.residual_rows = codec == Codec::kKivi2 ? 1 : 0});
    ASSERT_TRUE(DecodePage(good).ok());
    for (size_t len = 0; len < good.size(); ++len) {
      const std::vector<uint8_t> cut(good.begin(), good.begin() + len);  // own allocation (ASan)
      ASSERT_FALSE(DecodePage(cut).ok()) << "len " << len;
    }
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    EXPECT_EQ(DecodePage(longer).status().code(), absl::StatusCode::kDataLoss);
    for (size_t i = 0; i < good.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80, 0xFF}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= mask;
        ASSERT_FALSE(DecodePage(bad).ok()) << "byte " << i << " mask " << int(mask);
      }
    }
  }
}

TEST(PageTest, ErrorsNameTheValues) {
  TestPage tp(3, 64, 1);
  const std::vector<uint8_t> good = Encode(tp.view, Codec::kInt8);

  std::vector<uint8_t> bad = good;
  bad[4] = 2;  // format version 2
  absl::Status st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("version 2"), std::string::npos) << st;
  EXPECT_NE(st.message().find("version 1"), std::string::npos) << st;

  bad = good;
  bad[6] = 99;  // codec id
  st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("codec id 99"), std::string::npos) << st;

  bad = good;
  bad[0] = 'X';
  st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st;

  bad = good;
  bad[100] ^= 4;
  st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("CRC32C"), std::string::npos) << st;

  Fingerprint other = kModel;
  other[15] = 0xAB;
  st = DecodePage(good, {.expected_model = other}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(ToHex(kModel)), std::string::npos) << st;
  EXPECT_NE(st.message().find(ToHex(other)), std::string::npos) << st;
  EXPECT_EQ(ToHex(kModel), "deadbeef0102030405060708090a0b0c");

  bad = good;
  bad[8] = 4;  // n_tokens 4: the payload length no longer matches
  st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("payload_length"), std::string::npos) << st;
}

// Content checks behind a valid CRC: an encoder bug or a forged page cannot smuggle in positions
// that go backwards or a summary with min > max.
TEST(PageTest, InsaneContentBehindValidCrc) {
  TestPage tp(3, 64, 2);
  const std::vector<uint8_t> good = Encode(tp.view, Codec::kFp16, {.summary = SummaryType::kFp32});
  const size_t positions_at = 64 + 2 * 64 * 4;
  std::vector<uint8_t> bad = good;
  const int32_t back = tp.positions[0];
  std::memcpy(bad.data() + positions_at + 8, &back, 4);
  FixCrc(bad);
  absl::Status st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("position[2]"), std::string::npos) << st;

  bad = good;
  const float huge = 1e30f;
  std::memcpy(bad.data() + 64 + 4 * 10, &huge, 4);  // key_min[10] > key_max[10]
  FixCrc(bad);
  st = DecodePage(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("channel 10"), std::string::npos) << st;

  bad = good;
  bad[7] = 0x80;  // undefined flag bit
  FixCrc(bad);
  EXPECT_EQ(DecodePage(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageTest, EncodeRejectsBadInput) {
  TestPage tp(64, 64, 3);
  const size_t need = *EncodedSize(tp.view, Codec::kKivi4);
  std::vector<uint8_t> buf(need - 1);
  absl::StatusOr<size_t> r = EncodePage(tp.view, Codec::kKivi4, buf);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find(std::to_string(need)), std::string::npos) << r.status();
  EXPECT_EQ(EncodePage(tp.view, Codec::kKivi4, {}).status().code(),
            absl::StatusCode::kResourceExhausted);

  buf.resize(need);
  EXPECT_EQ(EncodePage(tp.view, static_cast<Codec>(42), buf).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePage(tp.view, Codec::kFp16, buf, {.residual_rows = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePage(tp.view, Codec::kKivi4, buf, {.residual_rows = 65}).status().code(),
            absl::StatusCode::kInvalidArgument);

  PageView v = tp.view;
  v.n_tokens = 0;
  EXPECT_EQ(EncodedSize(v, Codec::kFp16).status().code(), absl::StatusCode::kInvalidArgument);
  v = tp.view;
  v.head_dim = kMaxHeadDim + 1;
  EXPECT_EQ(EncodedSize(v, Codec::kFp16).status().code(), absl::StatusCode::kInvalidArgument);

  buf.resize(*EncodedSize(tp.view, Codec::kFp16));
  tp.positions[10] = tp.positions[9];
  absl::Status st = EncodePage(tp.view, Codec::kFp16, buf).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("position[10]"), std::string::npos) << st;
  tp.positions[10] = tp.positions[9] + 1;

  tp.keys[5 * 64 + 7] = NAN;
  st = EncodePage(tp.view, Codec::kFp16, buf).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("row 5 column 7"), std::string::npos) << st;
}

TEST(PageTest, HeaderAloneGivesShapeAndSize) {
  TestPage tp(31, 128, 4);
  const std::vector<uint8_t> buf = Encode(tp.view, Codec::kKivi2, {.residual_rows = 31});
  auto h = ParsePageHeader(std::span(buf).first(kPageHeaderBytes));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->total_bytes(), buf.size());
  EXPECT_EQ(h->residual_rows, 31);
  EXPECT_EQ(ParsePageHeader(std::span(buf).first(63)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(PageTest, DecodeIntoReusesThePage) {
  Page page;
  for (int64_t n : {64, 3, 31}) {
    TestPage tp(n, 64, 5);
    ASSERT_TRUE(DecodePageInto(Encode(tp.view, Codec::kBf16), {}, &page).ok());
    EXPECT_EQ(page.keys.size(), size_t(n * 64));
    EXPECT_EQ(page.positions, tp.positions);
  }
}

TEST(PageTest, KiviResidualRows) {
  // Sequence of 150 kept tokens in pages of 64: the last 32 tokens are rows 118..149.
  EXPECT_EQ(KiviResidualRows(0, 64, 150), 0);
  EXPECT_EQ(KiviResidualRows(64, 64, 150), 10);   // rows 118..127
  EXPECT_EQ(KiviResidualRows(128, 22, 150), 22);  // rows 128..149
  EXPECT_EQ(KiviResidualRows(0, 20, 20), 20);     // a short sequence is all residual
}

// The fuzz seeds (tests/fixtures/fuzz/<codec>.page.bin, one small page per codec, so that the
// fuzzer starts with a valid payload length for each) must stay valid pages. Regenerate them with
// GLIMPSE_WRITE_FUZZ_SEED=1.
TEST(PageTest, FuzzSeedsAreValid) {
  const char* root = std::getenv("GLIMPSE_SOURCE_DIR");
  for (const CodecInfo& codec : AllCodecs()) {
    const std::string path =
        std::string(root ? root : ".") + "/tests/fixtures/fuzz/" + codec.name + ".page.bin";
    if (std::getenv("GLIMPSE_WRITE_FUZZ_SEED") != nullptr) {
      TestPage tp(5, 40, 6);
      const std::vector<uint8_t> buf =
          Encode(tp.view, codec.id, {.residual_rows = codec.supports_residual ? 2 : 0});
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(buf.data()),
                 static_cast<std::streamsize>(buf.size()));
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path;
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    auto page = DecodePage(bytes);
    ASSERT_TRUE(page.ok()) << path << ": " << page.status();
    EXPECT_EQ(page->header.codec, codec.id);
  }
}

}  // namespace
}  // namespace glimpse::kvpage

// KV page encode/decode throughput per codec, against memcpy of the same bytes in the same run.
//
// Bytes counted are the fp32 keys + values a page holds (2·n·hd·4: 32 KiB for the default 64 ×
// 64 page), for every operation, so GB/s compare directly: memcpy copies those bytes, encode
// reads them and writes the (smaller) encoded page with its CRC32C, decode validates the page
// (CRC included) and writes them back as fp32. Two working sets: one page (hot in L1/L2) and 256
// pages (8 MiB of fp32, from L3/DRAM). After the Google Benchmark output, a markdown table gives
// GB/s and the ratio to memcpy at the same working set.
//
//   glimpse_bench_kvpage [--head_dim=64] [google benchmark flags, e.g. --benchmark_min_time=0.2
//                        --benchmark_repetitions=5: the table then uses medians]
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/kvpage/crc32c.h"
#include "core/kvpage/page.h"

namespace glimpse::kvpage {
namespace {

int64_t g_head_dim = 64;
constexpr int64_t kTokens = kDefaultPageTokens;

// `pages` pages of random keys/values, their encodings under one codec, and decode targets.
struct Workload {
  std::vector<float> kv;  // [pages, 2, n, hd]
  std::vector<int32_t> positions;
  std::vector<PageView> views;
  size_t stride = 0;  // bytes per encoded page slot
  std::vector<uint8_t> encoded;
  std::vector<Page> decoded;

  Workload(int64_t pages, Codec codec) {
    const int64_t cells = kTokens * g_head_dim;
    kv.resize(pages * 2 * cells);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : kv) x = normal(rng);
    for (int64_t t = 0; t < kTokens; ++t) positions.push_back(static_cast<int32_t>(3 * t));
    for (int64_t p = 0; p < pages; ++p) {
      views.push_back({0,
                       static_cast<uint32_t>(p),
                       kTokens,
                       g_head_dim,
                       &kv[2 * p * cells],
                       &kv[(2 * p + 1) * cells],
                       positions.data(),
                       {},
                       {}});
    }
    stride = *EncodedSize(views[0], codec);
    encoded.resize(stride * pages);
    for (int64_t p = 0; p < pages; ++p) {
      (void)EncodePage(views[p], codec, std::span(encoded).subspan(p * stride, stride));
    }
    decoded.resize(pages);
  }
  int64_t Bytes() const { return static_cast<int64_t>(kv.size() * sizeof(float)); }
};

void BM_Memcpy(benchmark::State& state) {
  Workload w(state.range(0), Codec::kFp16);
  std::vector<float> dst(w.kv.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), w.kv.data(), w.Bytes());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * w.Bytes());
}

void BM_Crc32c(benchmark::State& state) {
  Workload w(state.range(0), Codec::kFp16);
  const auto* bytes = reinterpret_cast<const uint8_t*>(w.kv.data());
  for (auto _ : state) benchmark::DoNotOptimize(Crc32cExtend(0, bytes, w.Bytes()));
  state.SetBytesProcessed(state.iterations() * w.Bytes());
}

void BM_Encode(benchmark::State& state, Codec codec) {
  Workload w(state.range(0), codec);
  for (auto _ : state) {
    for (size_t p = 0; p < w.views.size(); ++p) {
      auto r = EncodePage(w.views[p], codec, std::span(w.encoded).subspan(p * w.stride, w.stride));
      if (!r.ok()) state.SkipWithError(std::string(r.status().message()).c_str());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * w.Bytes());
  state.counters["page_bytes"] = static_cast<double>(w.stride);
}

void BM_Decode(benchmark::State& state, Codec codec) {
  Workload w(state.range(0), codec);
  for (auto _ : state) {
    for (size_t p = 0; p < w.views.size(); ++p) {
      const absl::Status st =
          DecodePageInto(std::span(w.encoded).subspan(p * w.stride, w.stride), {}, &w.decoded[p]);
      if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * w.Bytes());
}

// Console output as usual, plus GB/s of every run by name for the ratio table.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> gbps;
  // With --benchmark_repetitions the median aggregate is kept, else the single run.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("bytes_per_second");
      if (r.error_occurred || it == r.counters.end()) continue;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      gbps[r.run_name.str()] = it->second / 1e9;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

void PrintTable(const std::map<std::string, double>& gbps) {
  for (int pages : {1, 256}) {
    const std::string suffix = absl::StrCat("/", pages);
    const auto mc = gbps.find("memcpy" + suffix);
    if (mc == gbps.end()) continue;
    std::printf("\nhead_dim %lld, %d page%s of %lld tokens: memcpy %.1f GB/s",
                (long long)g_head_dim, pages, pages > 1 ? "s" : "", (long long)kTokens, mc->second);
    if (auto crc = gbps.find("crc32c" + suffix); crc != gbps.end()) {
      std::printf(", crc32c %.1f GB/s (%.2f× memcpy)", crc->second, crc->second / mc->second);
    }
    std::printf(
        "\n\n| codec | encode GB/s | encode / memcpy | decode GB/s | decode / memcpy |\n"
        "|---|---:|---:|---:|---:|\n");
    for (const CodecInfo& c : AllCodecs()) {
      const auto enc = gbps.find(absl::StrCat("encode/", c.name, suffix));
      const auto dec = gbps.find(absl::StrCat("decode/", c.name, suffix));
      if (enc == gbps.end() || dec == gbps.end()) continue;
      std::printf("| %s | %.1f | %.2f | %.1f | %.2f |\n", c.name, enc->second,
                  enc->second / mc->second, dec->second, dec->second / mc->second);
    }
  }
}

}  // namespace
}  // namespace glimpse::kvpage

int main(int argc, char** argv) {
  using namespace glimpse::kvpage;  // NOLINT
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--head_dim=", 11) == 0) g_head_dim = std::atoi(argv[i] + 11);
  }
  if (g_head_dim < 1 || g_head_dim > kMaxHeadDim) {
    std::fprintf(stderr, "--head_dim must be in 1..%lld\n", (long long)kMaxHeadDim);
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  for (int pages : {1, 256}) {
    benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Arg(pages);
    benchmark::RegisterBenchmark("crc32c", BM_Crc32c)->Arg(pages);
    for (const CodecInfo& c : AllCodecs()) {
      benchmark::RegisterBenchmark(absl::StrCat("encode/", c.name).c_str(), BM_Encode, c.id)
          ->Arg(pages);
      benchmark::RegisterBenchmark(absl::StrCat("decode/", c.name).c_str(), BM_Decode, c.id)
          ->Arg(pages);
    }
  }
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintTable(reporter.gbps);
  benchmark::Shutdown();
  return 0;
}

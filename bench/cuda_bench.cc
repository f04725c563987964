// GPU benchmark of the CUDA kernels (kernels/cuda) on a Llama-3.2-1B-shaped model with generated
// weights: prefill tokens/s at 2K/8K/32K, decode tokens/s at batch 1/8/64, prefill attention
// TFLOP/s, the eviction scorers' share of prefill at 32K, and decode attention over fp16, int8,
// fp8 and KIVI pages against the device's own copy bandwidth measured in the same run.
//
//   glimpse_bench_cuda [--json PATH] [--quick]
//
// bench/cuda_sdpa_peer.py times PyTorch's scaled_dot_product_attention at the same shapes and
// prints the ratio; tools/device/check_cuda.sh runs both. Exits 77 (skipped) without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/model/kv_pool.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_stats.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/select.h"
#include "kernels/quant.h"

namespace glimpse::bench {
namespace {

namespace kc = kernels::cuda;
using kc::DeviceBuffer;

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
void Check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(e));
  std::exit(1);
}

// Llama-3.2-1B's shape (config.json of meta-llama/Llama-3.2-1B).
struct Shape {
  int64_t hidden = 2048, heads = 32, kv_heads = 8, head_dim = 64, ffn = 8192, layers = 16,
          vocab = 128256;
};

// Mean milliseconds of `fn` over `iters` runs after one warm-up, by CUDA events.
double TimeMs(const std::function<void()>& fn, int iters) {
  fn();
  Check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(stop);
  Check(cudaEventSynchronize(stop), "timed runs");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

// `n` generated fp16 weights, uniform in ±0.05 (a fixed LCG: the figures do not depend on them).
DeviceBuffer<uint16_t> GeneratedHalves(int64_t n, uint32_t seed) {
  std::vector<uint16_t> table(4096);
  for (int i = 0; i < 4096; ++i) table[i] = kernels::Fp32ToFp16((i - 2048) / 2048.0f * 0.05f);
  std::vector<uint16_t> host(n);
  uint32_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    host[i] = table[s >> 20];
  }
  return DeviceBuffer<uint16_t>(host);
}

// One layer's weights, shared by every layer: each layer still reads all of them from memory
// (120 MB, twice the L2), so time per layer is that of distinct weights.
struct Weights {
  Shape shape;
  DeviceBuffer<uint16_t> wq, wk, wv, wo, wg, wu, wd, embed;
  DeviceBuffer<float> norm, inv_freq;

  explicit Weights(const Shape& s)
      : shape(s),
        wq(GeneratedHalves(s.hidden * s.hidden, 1)),
        wk(GeneratedHalves(s.kv_heads * s.head_dim * s.hidden, 2)),
        wv(GeneratedHalves(s.kv_heads * s.head_dim * s.hidden, 3)),
        wo(GeneratedHalves(s.hidden * s.hidden, 4)),
        wg(GeneratedHalves(s.ffn * s.hidden, 5)),
        wu(GeneratedHalves(s.ffn * s.hidden, 6)),
        wd(GeneratedHalves(s.hidden * s.ffn, 7)),
        embed(GeneratedHalves(s.vocab * s.hidden, 8)),
        norm(std::vector<float>(s.hidden, 1.0f)) {
    std::vector<float> f(s.head_dim / 2);
    for (int64_t i = 0; i < s.head_dim / 2; ++i) {
      f[i] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / s.head_dim);
    }
    inv_freq = DeviceBuffer<float>(f);
  }
  kc::DeviceWeight W(const DeviceBuffer<uint16_t>& b, int64_t rows, int64_t cols) const {
    return {b.data(), kc::Precision::kF16, rows, cols};
  }
};

// Activations of `m` rows, logits of `head_rows` of them.
struct Activations {
  DeviceBuffer<float> x, xn, q, k, v, attn, o, gate, up, logits;
  DeviceBuffer<uint16_t> q16, k16, v16, scratch;
  DeviceBuffer<int32_t> pos, ids, next;
  Activations(const Shape& s, int64_t m, int64_t head_rows)
      : x(m * s.hidden),
        xn(m * s.hidden),
        q(m * s.hidden),
        k(m * s.kv_heads * s.head_dim),
        v(m * s.kv_heads * s.head_dim),
        attn(m * s.hidden),
        o(m * s.hidden),
        gate(m * s.ffn),
        up(m * s.ffn),
        logits(head_rows * s.vocab),
        q16(m * s.hidden),
        k16(m * s.kv_heads * s.head_dim),
        v16(m * s.kv_heads * s.head_dim),
        scratch(m * s.ffn),
        ids(std::vector<int32_t>(m, 42)),
        next(m) {
    std::vector<int32_t> p(m);
    for (int64_t i = 0; i < m; ++i) p[i] = static_cast<int32_t>(i);
    pos = DeviceBuffer<int32_t>(p);
  }
};

// The layers' matrix work and norms around attention, for `m` rows; `attend` fills a.attn from
// a.q, a.k, a.v (post-RoPE) for layer `l`.
void Layers(const Weights& w, Activations& a, kc::Blas& blas, int64_t m,
            const std::function<void(int64_t)>& attend) {
  const Shape& s = w.shape;
  const int64_t kv = s.kv_heads * s.head_dim;
  cudaStream_t st = blas.stream();
  for (int64_t l = 0; l < s.layers; ++l) {
    Check(kc::RmsNorm(a.xn.data(), a.x.data(), w.norm.data(), 1e-5f, m, s.hidden, st), "norm");
    Check(kc::MatMul(blas, a.q.data(), a.xn.data(), w.W(w.wq, s.hidden, s.hidden), m,
                     a.scratch.data()),
          "wq");
    Check(kc::MatMulLowPrecision(blas, a.k.data(), a.scratch.data(), w.W(w.wk, kv, s.hidden), m),
          "wk");
    Check(kc::MatMulLowPrecision(blas, a.v.data(), a.scratch.data(), w.W(w.wv, kv, s.hidden), m),
          "wv");
    Check(kc::Rope(a.q.data(), a.pos.data(), w.inv_freq.data(), kernels::RopeStyle::kHalf, m,
                   s.heads, s.head_dim, st),
          "rope q");
    Check(kc::Rope(a.k.data(), a.pos.data(), w.inv_freq.data(), kernels::RopeStyle::kHalf, m,
                   s.kv_heads, s.head_dim, st),
          "rope k");
    attend(l);
    Check(kc::MatMul(blas, a.o.data(), a.attn.data(), w.W(w.wo, s.hidden, s.hidden), m,
                     a.scratch.data()),
          "wo");
    Check(kc::Add(a.x.data(), a.o.data(), m * s.hidden, st), "residual");
    Check(kc::RmsNorm(a.xn.data(), a.x.data(), w.norm.data(), 1e-5f, m, s.hidden, st), "norm");
    Check(kc::MatMul(blas, a.gate.data(), a.xn.data(), w.W(w.wg, s.ffn, s.hidden), m,
                     a.scratch.data()),
          "gate");
    Check(
        kc::MatMulLowPrecision(blas, a.up.data(), a.scratch.data(), w.W(w.wu, s.ffn, s.hidden), m),
        "up");
    Check(kc::SiluMul(a.gate.data(), a.gate.data(), a.up.data(), m * s.ffn, st), "silu");
    Check(kc::MatMul(blas, a.o.data(), a.gate.data(), w.W(w.wd, s.hidden, s.ffn), m,
                     a.scratch.data()),
          "down");
    Check(kc::Add(a.x.data(), a.o.data(), m * s.hidden, st), "residual");
  }
}

// The logits of the last `rows` rows and their greedy tokens.
void Head(const Weights& w, Activations& a, kc::Blas& blas, int64_t m, int64_t rows) {
  const Shape& s = w.shape;
  const int64_t first = m - rows;
  Check(kc::RmsNorm(a.xn.data(), a.x.data() + first * s.hidden, w.norm.data(), 1e-5f, rows,
                    s.hidden, blas.stream()),
        "final norm");
  Check(kc::MatMul(blas, a.logits.data(), a.xn.data(), w.W(w.embed, s.vocab, s.hidden), rows,
                   a.scratch.data()),
        "lm head");
  Check(kc::ArgmaxRows(a.next.data(), a.logits.data(), rows, s.vocab, blas.stream()), "argmax");
}

struct Figures {
  std::vector<std::string> json;
  void Add(const std::string& kind, const std::string& fields) {
    json.push_back("{\"kind\": \"" + kind + "\", " + fields + "}");
  }
};

std::string Num(const char* key, double v) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "\"%s\": %.6g", key, v);
  return buf;
}

// Prefill of one T-token prompt through every layer; with `scored`, each layer also writes the
// rows' log-sum-exp, accumulates the last 64 rows' attention over all keys (SnapKV's window) and
// selects the best 20 % of each kv-head's entries.
double PrefillMs(const Weights& w, int64_t t, bool scored, int iters) {
  const Shape& s = w.shape;
  Activations a(s, t, 1);
  kc::Blas blas(nullptr);
  DeviceBuffer<float> lse(s.heads * t), scores(s.kv_heads * t);
  DeviceBuffer<int32_t> kept(s.kv_heads * (t / 5));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t kv = s.kv_heads * s.head_dim;
  auto attend = [&](int64_t) {
    Check(kc::RoundTo(a.q16.data(), kc::Precision::kF16, a.q.data(), t * s.hidden, nullptr), "q");
    Check(kc::RoundTo(a.k16.data(), kc::Precision::kF16, a.k.data(), t * kv, nullptr), "k");
    Check(kc::RoundTo(a.v16.data(), kc::Precision::kF16, a.v.data(), t * kv, nullptr), "v");
    Check(kc::AttendPrefill(a.attn.data(), scored ? lse.data() : nullptr, a.q16.data(),
                            a.pos.data(), a.k16.data(), a.v16.data(),
                            kc::KvStrides::Interleaved(s.kv_heads, s.head_dim), a.pos.data(), scale,
                            t, t, s.heads, s.kv_heads, s.head_dim, nullptr),
          "attend");
    if (scored) {
      Check(kc::AccumulateAttention(
                scores.data(), a.q16.data(), lse.data(), a.pos.data(), std::max<int64_t>(0, t - 64),
                t, a.k16.data(), kc::KvStrides::Interleaved(s.kv_heads, s.head_dim), a.pos.data(),
                scale, t, t, s.heads, s.kv_heads, s.head_dim, nullptr),
            "scores");
      Check(kc::TopKRows(kept.data(), scores.data(), s.kv_heads, t, t / 5, nullptr), "select");
    }
  };
  return TimeMs(
      [&] {
        Check(
            kc::EmbedRows(a.x.data(), w.embed.data(), a.ids.data(), t, s.vocab, s.hidden, nullptr),
            "embed");
        Layers(w, a, blas, t, attend);
        Head(w, a, blas, t, 1);
      },
      iters);
}

// Pages of `batch` sequences × kv_heads, `context` entries each, in one format, for one layer.
struct LayerPages {
  DeviceBuffer<uint8_t> bytes;
  DeviceBuffer<float> scales;
  DeviceBuffer<int32_t> pos;
  DeviceBuffer<kernels::KvPageView> views;
  int64_t pages_per_head = 0, total_bytes = 0;

  LayerPages(kernels::KvDType dtype, int64_t batch, int64_t kv_heads, int64_t context,
             int64_t head_dim) {
    constexpr int64_t kPage = 64;
    pages_per_head = (context + kPage - 1) / kPage;
    const bool kivi = dtype == kernels::KvDType::kKivi4 || dtype == kernels::KvDType::kKivi2;
    const int64_t elt = dtype == kernels::KvDType::kF16 ? 2 : 1;
    const int64_t k_bytes =
        kivi ? model::KvGroupedSectionBytes(dtype, true, kPage, head_dim) : kPage * head_dim * elt;
    const int64_t v_bytes =
        kivi ? model::KvGroupedSectionBytes(dtype, false, kPage, head_dim) : kPage * head_dim * elt;
    const int64_t n_pages = batch * kv_heads * pages_per_head;
    bytes = DeviceBuffer<uint8_t>(n_pages * (k_bytes + v_bytes));
    // 0x3c: fp16 pairs of ~1.06, int8 60, fp8 ~0.031, KIVI scales ~1.06: finite everywhere.
    Check(cudaMemset(bytes.data(), 0x3c, n_pages * (k_bytes + v_bytes)), "fill pages");
    scales = DeviceBuffer<float>(std::vector<float>(kPage, 0.01f));
    std::vector<int32_t> p(pages_per_head * kPage);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i);
    pos = DeviceBuffer<int32_t>(p);
    std::vector<kernels::KvPageView> v(n_pages);
    const bool scaled = dtype == kernels::KvDType::kI8 || dtype == kernels::KvDType::kE4M3;
    for (int64_t i = 0; i < n_pages; ++i) {
      const int64_t page = i % pages_per_head;
      uint8_t* base = bytes.data() + i * (k_bytes + v_bytes);
      v[i] = {.dtype = dtype,
              .k = base,
              .v = base + k_bytes,
              .k_scale = scaled ? scales.data() : nullptr,
              .v_scale = scaled ? scales.data() : nullptr,
              .pos = pos.data() + page * kPage,
              .rows = std::min(kPage, context - page * kPage)};
    }
    views = DeviceBuffer<kernels::KvPageView>(v);
    total_bytes = n_pages * (k_bytes + v_bytes);
  }
};

// The decode step's queries: sequence b, kv-head g reads the group's query rows.
DeviceBuffer<kc::PagedQuery> DecodeQueries(const Shape& s, Activations& a, int64_t batch,
                                           int64_t pages_per_head, const int32_t* q_pos) {
  const int64_t group = s.heads / s.kv_heads;
  std::vector<kc::PagedQuery> q;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < s.kv_heads; ++g) {
      const int64_t at = (b * s.heads + g * group) * s.head_dim;
      const auto first = static_cast<int32_t>((b * s.kv_heads + g) * pages_per_head);
      q.push_back({.out = a.attn.data() + at,
                   .q = a.q.data() + at,
                   .q_pos = q_pos,
                   .n_q = static_cast<int32_t>(group),
                   .page_begin = first,
                   .page_end = first + static_cast<int32_t>(pages_per_head)});
    }
  }
  return DeviceBuffer<kc::PagedQuery>(q);
}

// One decode step of `batch` sequences of `context` cached entries (fp16 pages) through every
// layer. The step's own new entries are not appended to the pages (a copy of 2 KB per sequence
// and layer, left out of the figure).
double DecodeStepMs(const Weights& w, int64_t batch, int64_t context, int iters) {
  const Shape& s = w.shape;
  Activations a(s, batch, batch);
  kc::Blas blas(nullptr);
  std::vector<LayerPages> layers;
  for (int64_t l = 0; l < s.layers; ++l) {
    layers.emplace_back(kernels::KvDType::kF16, batch, s.kv_heads, context, s.head_dim);
  }
  const int64_t pages = layers[0].pages_per_head;
  DeviceBuffer<int32_t> q_pos(std::vector<int32_t>(s.heads / s.kv_heads, context));
  DeviceBuffer<kc::PagedQuery> queries = DecodeQueries(s, a, batch, pages, q_pos.data());
  DeviceBuffer<float> scratch(kc::PagedScratchFloats(batch * s.kv_heads, pages, s.head_dim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  auto attend = [&](int64_t l) {
    Check(kc::AttendPagedBatch(queries.data(), batch * s.kv_heads, layers[l].views.data(), pages,
                               scale, s.head_dim, scratch.data(), nullptr),
          "paged attention");
  };
  return TimeMs(
      [&] {
        Check(kc::EmbedRows(a.x.data(), w.embed.data(), a.ids.data(), batch, s.vocab, s.hidden,
                            nullptr),
              "embed");
        Layers(w, a, blas, batch, attend);
        Head(w, a, blas, batch, batch);
      },
      iters);
}

double CopyGBs() {
  const int64_t n = int64_t{1} << 30;
  DeviceBuffer<uint8_t> a(n), b(n);
  const double ms = TimeMs(
      [&] { Check(cudaMemcpy(b.data(), a.data(), n, cudaMemcpyDeviceToDevice), "copy"); }, 10);
  return 2.0 * n / (ms * 1e6);  // bytes read and written
}

int Main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (kc::DeviceCount() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  Figures figures;
  const Shape shape;
  const Weights weights(shape);
  const double copy = CopyGBs();
  std::printf("device copy: %.0f GB/s (read + written)\n", copy);
  figures.Add("copy", Num("gb_per_s", copy));

  std::printf("\n[1/4] prefill attention (32 q-heads, 8 kv-heads, head_dim 64, causal)\n");
  const std::vector<int64_t> lengths =
      quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{2048, 8192, 32768};
  for (const int64_t t : lengths) {
    DeviceBuffer<uint16_t> q = GeneratedHalves(t * shape.hidden, 11),
                           k = GeneratedHalves(t * shape.kv_heads * shape.head_dim, 12),
                           v = GeneratedHalves(t * shape.kv_heads * shape.head_dim, 13);
    std::vector<int32_t> p(t);
    for (int64_t i = 0; i < t; ++i) p[i] = static_cast<int32_t>(i);
    DeviceBuffer<int32_t> pos(p);
    DeviceBuffer<float> out(t * shape.hidden);
    const double ms = TimeMs(
        [&] {
          Check(kc::AttendPrefill(out.data(), nullptr, q.data(), pos.data(), k.data(), v.data(),
                                  kc::KvStrides::Interleaved(shape.kv_heads, shape.head_dim),
                                  pos.data(), 0.125f, t, t, shape.heads, shape.kv_heads,
                                  shape.head_dim, nullptr),
                "attend");
        },
        t >= 32768 ? 3 : 10);
    // Causal: half of the 4·T²·D·H multiply-adds of full attention.
    const double tflops = 2.0 * t * t * shape.head_dim * shape.heads / (ms * 1e9);
    std::printf("  T=%-6lld %8.2f ms  %7.1f TFLOP/s\n", static_cast<long long>(t), ms, tflops);
    figures.Add("attention",
                Num("tokens", t) + ", " + Num("ms", ms) + ", " + Num("tflops", tflops));
  }

  std::printf("\n[2/4] prefill, Llama-3.2-1B shape, 16 layers, generated fp16 weights\n");
  for (const int64_t t : lengths) {
    const int iters = t >= 32768 ? 2 : 5;
    const double ms = PrefillMs(weights, t, false, iters);
    const double scored = PrefillMs(weights, t, true, iters);
    const double share = (scored - ms) / scored;
    std::printf("  T=%-6lld %9.1f ms  %9.0f tok/s   scoring + selection %.2f%% of prefill\n",
                static_cast<long long>(t), ms, t / (ms / 1e3), 100 * share);
    figures.Add("prefill", Num("tokens", t) + ", " + Num("ms", ms) + ", " +
                               Num("tokens_per_s", t / (ms / 1e3)) + ", " +
                               Num("scoring_share", share));
  }

  std::printf("\n[3/4] decode step, 1024 cached tokens per sequence in fp16 pages\n");
  for (const int64_t batch : {1, 8, 64}) {
    const double ms = DecodeStepMs(weights, batch, 1024, 10);
    std::printf("  batch %-3lld %8.2f ms/step  %8.0f tok/s\n", static_cast<long long>(batch), ms,
                batch / (ms / 1e3));
    figures.Add("decode", Num("batch", batch) + ", " + Num("context", 1024) + ", " + Num("ms", ms) +
                              ", " + Num("tokens_per_s", batch / (ms / 1e3)));
  }

  std::printf("\n[4/4] decode attention, batch 64 × 8 kv-heads × 4096 entries, one layer\n");
  for (const kernels::KvDType d : {kernels::KvDType::kF16, kernels::KvDType::kI8,
                                   kernels::KvDType::kE4M3, kernels::KvDType::kKivi4}) {
    const int64_t batch = 64, context = 4096;
    Activations a(shape, batch, 0);
    LayerPages pages(d, batch, shape.kv_heads, context, shape.head_dim);
    DeviceBuffer<int32_t> q_pos(std::vector<int32_t>(4, context));
    DeviceBuffer<kc::PagedQuery> queries =
        DecodeQueries(shape, a, batch, pages.pages_per_head, q_pos.data());
    DeviceBuffer<float> scratch(
        kc::PagedScratchFloats(batch * shape.kv_heads, pages.pages_per_head, shape.head_dim));
    const double ms = TimeMs(
        [&] {
          Check(kc::AttendPagedBatch(queries.data(), batch * shape.kv_heads, pages.views.data(),
                                     pages.pages_per_head, 0.125f, shape.head_dim, scratch.data(),
                                     nullptr),
                "paged");
        },
        20);
    const double gbs = pages.total_bytes / (ms * 1e6);
    std::printf("  %-9s %7.3f ms  %7.0f GB/s of pages  (%.2f of copy)\n", model::KvDTypeName(d), ms,
                gbs, gbs / copy);
    figures.Add("paged", std::string("\"format\": \"") + model::KvDTypeName(d) + "\", " +
                             Num("ms", ms) + ", " + Num("gb_per_s", gbs) + ", " +
                             Num("of_copy", gbs / copy));
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::perror(json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"figures\": [\n", prop.name);
    for (size_t i = 0; i < figures.json.size(); ++i) {
      std::fprintf(f, "  %s%s\n", figures.json[i].c_str(), i + 1 < figures.json.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace glimpse::bench

int main(int argc, char** argv) { return glimpse::bench::Main(argc, argv); }

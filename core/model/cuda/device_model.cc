#include "core/model/cuda/device_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant.h"

namespace glimpse::model::cuda {
namespace {

namespace kc = kernels::cuda;
using kc::DeviceBuffer;

constexpr int64_t kPageTokens = 64;  // rows per fp16 page view of a cache

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status Cublas(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", static_cast<int>(e)));
}

// `b` holds at least n elements afterwards (reallocated, contents lost, when it held fewer).
template <typename T>
absl::Status Ensure(DeviceBuffer<T>& b, int64_t n) {
  if (b.size() >= n) return absl::OkStatus();
  b = DeviceBuffer<T>(n);
  if (!b.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("device memory: cannot allocate ", n * sizeof(T), " bytes"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CopyIn(DeviceBuffer<T>& b, const T* host, int64_t n, cudaStream_t stream) {
  RETURN_IF_ERROR(Ensure(b, n));
  if (n == 0) return absl::OkStatus();
  return Cuda(cudaMemcpyAsync(b.data(), host, sizeof(T) * n, cudaMemcpyHostToDevice, stream),
              "copy to device");
}

struct Matrix {
  DeviceBuffer<uint16_t> data = {};
  int64_t rows = 0, cols = 0;
  kc::DeviceWeight view() const { return {data.data(), kc::Precision::kF16, rows, cols}; }
};

// A stored matrix decoded on the device to fp16; the stored bytes are freed once decoded.
absl::StatusOr<Matrix> UploadMatrix(const kernels::WeightView& w) {
  Matrix m{.rows = w.rows, .cols = w.cols};
  const int64_t bytes = w.rows * kernels::RowBytes(w.type, w.cols);
  DeviceBuffer<uint8_t> stored;
  RETURN_IF_ERROR(CopyIn(stored, static_cast<const uint8_t*>(w.data), bytes, nullptr));
  RETURN_IF_ERROR(Ensure(m.data, w.rows * w.cols));
  RETURN_IF_ERROR(Cuda(kc::DequantizeRows(m.data.data(), kc::Precision::kF16, stored.data(), w.type,
                                          w.rows, w.cols, nullptr),
                       "decode weights"));
  RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "decode weights"));
  return m;
}

// n floats, or an empty buffer for a vector the model does not have.
absl::StatusOr<DeviceBuffer<float>> UploadFloats(const float* host, int64_t n) {
  DeviceBuffer<float> b;
  if (host == nullptr) return b;
  RETURN_IF_ERROR(CopyIn(b, host, n, nullptr));
  RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "upload"));
  return b;
}

}  // namespace

struct DeviceModel::Weights {
  struct Layer {
    Matrix wq, wk, wv, wo, gate, up, down;
    DeviceBuffer<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  };
  Matrix embed, output;  // output is empty when tied to embed
  DeviceBuffer<float> output_norm, inv_freq;
  std::vector<Layer> layers;

  const Matrix& out() const { return output.rows > 0 ? output : embed; }
};

DeviceModel::DeviceModel(const Model& model) : model_(model) {}
DeviceModel::~DeviceModel() = default;

absl::StatusOr<std::unique_ptr<DeviceModel>> DeviceModel::Upload(const Model& model) {
  if (kc::DeviceCount() == 0) return absl::FailedPreconditionError("no CUDA device");
  const ModelWeights& w = model.weights();
  const ModelConfig& c = w.config;
  if (c.head_dim != 16 && c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA runtime has no attention for head_dim ", c.head_dim));
  }
  auto device = std::unique_ptr<DeviceModel>(new DeviceModel(model));
  auto weights = std::make_unique<Weights>();
  ASSIGN_OR_RETURN(weights->embed, UploadMatrix(w.token_embd));
  if (w.output.data != w.token_embd.data) {
    ASSIGN_OR_RETURN(weights->output, UploadMatrix(w.output));
  }
  ASSIGN_OR_RETURN(weights->output_norm, UploadFloats(w.output_norm, c.hidden));
  const std::vector<float> inv_freq = RopeInverseFrequencies(w);
  ASSIGN_OR_RETURN(weights->inv_freq, UploadFloats(inv_freq.data(), inv_freq.size()));
  for (const LayerWeights& lw : w.layers) {
    Weights::Layer& l = weights->layers.emplace_back();
    ASSIGN_OR_RETURN(l.wq, UploadMatrix(lw.wq));
    ASSIGN_OR_RETURN(l.wk, UploadMatrix(lw.wk));
    ASSIGN_OR_RETURN(l.wv, UploadMatrix(lw.wv));
    ASSIGN_OR_RETURN(l.wo, UploadMatrix(lw.wo));
    ASSIGN_OR_RETURN(l.gate, UploadMatrix(lw.w_gate));
    ASSIGN_OR_RETURN(l.up, UploadMatrix(lw.w_up));
    ASSIGN_OR_RETURN(l.down, UploadMatrix(lw.w_down));
    ASSIGN_OR_RETURN(l.attn_norm, UploadFloats(lw.attn_norm, c.hidden));
    ASSIGN_OR_RETURN(l.ffn_norm, UploadFloats(lw.ffn_norm, c.hidden));
    ASSIGN_OR_RETURN(l.bq, UploadFloats(lw.bq, lw.wq.rows));
    ASSIGN_OR_RETURN(l.bk, UploadFloats(lw.bk, lw.wk.rows));
    ASSIGN_OR_RETURN(l.bv, UploadFloats(lw.bv, lw.wv.rows));
    ASSIGN_OR_RETURN(l.q_norm, UploadFloats(lw.q_norm, c.head_dim));
    ASSIGN_OR_RETURN(l.k_norm, UploadFloats(lw.k_norm, c.head_dim));
    for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      device->weight_bytes_ += 2 * m->rows * m->cols;
    }
  }
  device->weight_bytes_ +=
      2 * (weights->embed.rows * weights->embed.cols + weights->output.rows * weights->output.cols);
  device->weights_ = std::move(weights);
  return device;
}

struct DeviceSequence::Cache {
  struct Layer {
    DeviceBuffer<uint8_t> k, v;            // [kv_heads, capacity, head_dim] fp16 or int8
    DeviceBuffer<float> k_scale, v_scale;  // [kv_heads, capacity], int8 only
  };
  kernels::KvDType dtype = kernels::KvDType::kF16;
  int64_t capacity = 0;
  std::vector<Layer> layers;
  DeviceBuffer<int32_t> pos;  // [capacity]: entry i at position i

  kc::KvCacheView View(int32_t layer) {
    Layer& l = layers[layer];
    return {.dtype = dtype,
            .k = l.k.data(),
            .v = l.v.data(),
            .k_scale = l.k_scale.data(),
            .v_scale = l.v_scale.data(),
            .capacity = capacity};
  }
};

DeviceSequence::DeviceSequence(const DeviceModel& model, int64_t capacity)
    : model_(model), capacity_(capacity), cache_(std::make_unique<Cache>()) {}
DeviceSequence::~DeviceSequence() = default;

kernels::KvDType DeviceSequence::kv_dtype() const { return cache_->dtype; }

absl::StatusOr<std::unique_ptr<DeviceSequence>> DeviceSequence::Create(const DeviceModel& model,
                                                                       int64_t capacity,
                                                                       kernels::KvDType kv_dtype) {
  if (capacity < 1) return absl::InvalidArgumentError("a sequence needs capacity >= 1");
  if (kv_dtype != kernels::KvDType::kF16 && kv_dtype != kernels::KvDType::kI8) {
    return absl::InvalidArgumentError("the CUDA runtime's KV caches are fp16 or int8");
  }
  const ModelConfig& c = model.model().config();
  auto seq = std::unique_ptr<DeviceSequence>(new DeviceSequence(model, capacity));
  seq->cache_->dtype = kv_dtype;
  seq->cache_->capacity = capacity;
  const int64_t rows = int64_t{c.n_kv_heads} * capacity;
  const int64_t bytes = rows * c.head_dim * (kv_dtype == kernels::KvDType::kI8 ? 1 : 2);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    Cache::Layer& layer = seq->cache_->layers.emplace_back();
    RETURN_IF_ERROR(Ensure(layer.k, bytes));
    RETURN_IF_ERROR(Ensure(layer.v, bytes));
    if (kv_dtype == kernels::KvDType::kI8) {
      RETURN_IF_ERROR(Ensure(layer.k_scale, rows));
      RETURN_IF_ERROR(Ensure(layer.v_scale, rows));
    }
  }
  std::vector<int32_t> pos(capacity);
  for (int64_t i = 0; i < capacity; ++i) pos[i] = static_cast<int32_t>(i);
  RETURN_IF_ERROR(CopyIn(seq->cache_->pos, pos.data(), capacity, nullptr));
  RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "sequence"));
  return seq;
}

struct DeviceRunner::Scratch {
  cudaStream_t stream = nullptr;
  std::unique_ptr<kc::Blas> blas;
  DeviceBuffer<float> x, xn, q, k, v, attn, tmp, gate, up, logits, paged;
  DeviceBuffer<uint16_t> q16, x16, stage_k, stage_v;
  DeviceBuffer<int32_t> ids, pos, group_pos;
  DeviceBuffer<kc::PagedQuery> queries;
  DeviceBuffer<kernels::KvPageView> views;

  ~Scratch() {
    blas.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Room for m rows of every activation.
  absl::Status Reserve(const ModelConfig& c, int64_t m) {
    const int64_t qd = int64_t{c.n_heads} * c.head_dim, kvd = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t widest = std::max<int64_t>({c.hidden, qd, c.ffn_hidden});
    for (auto [buf, n] : {std::pair{&x, c.hidden},
                          {&xn, c.hidden},
                          {&q, qd},
                          {&k, kvd},
                          {&v, kvd},
                          {&attn, qd},
                          {&tmp, c.hidden},
                          {&gate, c.ffn_hidden},
                          {&up, c.ffn_hidden}}) {
      RETURN_IF_ERROR(Ensure(*buf, m * n));
    }
    RETURN_IF_ERROR(Ensure(q16, m * qd));
    return Ensure(x16, m * widest);
  }
};

DeviceRunner::DeviceRunner(const DeviceModel& model)
    : model_(model), scratch_(std::make_unique<Scratch>()) {}
DeviceRunner::~DeviceRunner() = default;

absl::StatusOr<std::unique_ptr<DeviceRunner>> DeviceRunner::Create(const DeviceModel& model) {
  auto runner = std::unique_ptr<DeviceRunner>(new DeviceRunner(model));
  Scratch& s = *runner->scratch_;
  RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "stream"));
  s.blas = std::make_unique<kc::Blas>(s.stream);
  if (!s.blas->ok()) return absl::InternalError("cuBLAS: cannot create a handle");
  return runner;
}

absl::Status DeviceRunner::Embed(std::span<const int32_t> tokens) {
  const ModelConfig& c = model_.model().config();
  for (const int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", t, " is outside the vocabulary of ", c.vocab_size));
    }
  }
  Scratch& s = *scratch_;
  const auto m = static_cast<int64_t>(tokens.size());
  RETURN_IF_ERROR(s.Reserve(c, m));
  RETURN_IF_ERROR(CopyIn(s.ids, tokens.data(), m, s.stream));
  return Cuda(kc::EmbedRows(s.x.data(), model_.weights_->embed.data.data(), s.ids.data(), m,
                            model_.weights_->embed.rows, c.hidden, s.stream),
              "embed");
}

absl::Status DeviceRunner::Layers(int64_t m, const int32_t* pos,
                                  const std::function<absl::Status(int32_t)>& attend) {
  const ModelConfig& c = model_.model().config();
  const DeviceModel::Weights& w = *model_.weights_;
  Scratch& s = *scratch_;
  kc::Blas& blas = *s.blas;
  const cudaStream_t st = s.stream;
  const int64_t D = c.hidden, H = c.n_heads, Hkv = c.n_kv_heads, hd = c.head_dim;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const DeviceModel::Weights::Layer& l = w.layers[layer];
    RETURN_IF_ERROR(Cuda(
        kc::RmsNorm(s.xn.data(), s.x.data(), l.attn_norm.data(), c.rms_eps, m, D, st), "norm"));
    RETURN_IF_ERROR(
        Cublas(kc::MatMul(blas, s.q.data(), s.xn.data(), l.wq.view(), m, s.x16.data()), "q"));
    RETURN_IF_ERROR(
        Cublas(kc::MatMulLowPrecision(blas, s.k.data(), s.x16.data(), l.wk.view(), m), "k"));
    RETURN_IF_ERROR(
        Cublas(kc::MatMulLowPrecision(blas, s.v.data(), s.x16.data(), l.wv.view(), m), "v"));
    if (l.bq.size() > 0) {
      RETURN_IF_ERROR(Cuda(kc::AddBias(s.q.data(), l.bq.data(), m, H * hd, st), "q bias"));
      RETURN_IF_ERROR(Cuda(kc::AddBias(s.k.data(), l.bk.data(), m, Hkv * hd, st), "k bias"));
      RETURN_IF_ERROR(Cuda(kc::AddBias(s.v.data(), l.bv.data(), m, Hkv * hd, st), "v bias"));
    }
    if (l.q_norm.size() > 0) {
      RETURN_IF_ERROR(
          Cuda(kc::RmsNorm(s.q.data(), s.q.data(), l.q_norm.data(), c.rms_eps, m * H, hd, st),
               "q norm"));
      RETURN_IF_ERROR(
          Cuda(kc::RmsNorm(s.k.data(), s.k.data(), l.k_norm.data(), c.rms_eps, m * Hkv, hd, st),
               "k norm"));
    }
    RETURN_IF_ERROR(
        Cuda(kc::Rope(s.q.data(), pos, w.inv_freq.data(), c.rope_style, m, H, hd, st), "rope q"));
    RETURN_IF_ERROR(
        Cuda(kc::Rope(s.k.data(), pos, w.inv_freq.data(), c.rope_style, m, Hkv, hd, st), "rope k"));
    RETURN_IF_ERROR(attend(layer));
    RETURN_IF_ERROR(
        Cublas(kc::MatMul(blas, s.tmp.data(), s.attn.data(), l.wo.view(), m, s.x16.data()), "o"));
    RETURN_IF_ERROR(Cuda(kc::Add(s.x.data(), s.tmp.data(), m * D, st), "residual"));
    RETURN_IF_ERROR(
        Cuda(kc::RmsNorm(s.xn.data(), s.x.data(), l.ffn_norm.data(), c.rms_eps, m, D, st), "norm"));
    RETURN_IF_ERROR(Cublas(
        kc::MatMul(blas, s.gate.data(), s.xn.data(), l.gate.view(), m, s.x16.data()), "gate"));
    RETURN_IF_ERROR(
        Cublas(kc::MatMulLowPrecision(blas, s.up.data(), s.x16.data(), l.up.view(), m), "up"));
    RETURN_IF_ERROR(
        Cuda(kc::SiluMul(s.gate.data(), s.gate.data(), s.up.data(), m * c.ffn_hidden, st), "silu"));
    RETURN_IF_ERROR(Cublas(
        kc::MatMul(blas, s.tmp.data(), s.gate.data(), l.down.view(), m, s.x16.data()), "down"));
    RETURN_IF_ERROR(Cuda(kc::Add(s.x.data(), s.tmp.data(), m * D, st), "residual"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DeviceRunner::Logits(int64_t first, int64_t rows) {
  const ModelConfig& c = model_.model().config();
  const DeviceModel::Weights& w = *model_.weights_;
  Scratch& s = *scratch_;
  const Matrix& out = w.out();
  RETURN_IF_ERROR(Ensure(s.logits, rows * out.rows));
  RETURN_IF_ERROR(Cuda(kc::RmsNorm(s.xn.data(), s.x.data() + first * c.hidden, w.output_norm.data(),
                                   c.rms_eps, rows, c.hidden, s.stream),
                       "final norm"));
  RETURN_IF_ERROR(Cublas(
      kc::MatMul(*s.blas, s.logits.data(), s.xn.data(), out.view(), rows, s.x16.data()), "logits"));
  std::vector<float> logits(rows * out.rows);
  RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(logits.data(), s.logits.data(), logits.size() * 4,
                                       cudaMemcpyDeviceToHost, s.stream),
                       "copy logits"));
  RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(s.stream), "forward pass"));
  return logits;
}

absl::StatusOr<std::vector<float>> DeviceRunner::Prefill(DeviceSequence& seq,
                                                         std::span<const int32_t> tokens,
                                                         bool all_logits) {
  if (&seq.model_ != &model_) return absl::InvalidArgumentError("sequence of another model");
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("prefill of no tokens");
  if (seq.length_ + n > seq.capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence of capacity ", seq.capacity_,
                                                     " cannot take ", n, " more tokens after ",
                                                     seq.length_));
  }
  const ModelConfig& c = model_.model().config();
  Scratch& s = *scratch_;
  RETURN_IF_ERROR(Embed(tokens));
  const int64_t first = seq.length_, hd = c.head_dim;
  const int32_t* pos = seq.cache_->pos.data() + first;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool staged = seq.kv_dtype() == kernels::KvDType::kI8;
  if (staged) {  // the prefill reads an int8 cache through fp16 copies of each layer
    RETURN_IF_ERROR(Ensure(s.stage_k, c.n_kv_heads * (first + n) * hd));
    RETURN_IF_ERROR(Ensure(s.stage_v, c.n_kv_heads * (first + n) * hd));
  }
  auto attend = [&](int32_t layer) -> absl::Status {
    const kc::KvCacheView cache = seq.cache_->View(layer);
    RETURN_IF_ERROR(
        Cuda(kc::AppendKv(cache, s.k.data(), s.v.data(), n, first, c.n_kv_heads, hd, s.stream),
             "append kv"));
    RETURN_IF_ERROR(Cuda(
        kc::RoundTo(s.q16.data(), kc::Precision::kF16, s.q.data(), n * c.n_heads * hd, s.stream),
        "round q"));
    const void* k = cache.k;
    const void* v = cache.v;
    int64_t rows = seq.capacity_;
    if (staged) {
      RETURN_IF_ERROR(Cuda(kc::DecodeKvToHalf(s.stage_k.data(), s.stage_v.data(), cache, first + n,
                                              c.n_kv_heads, hd, s.stream),
                           "stage kv"));
      k = s.stage_k.data(), v = s.stage_v.data(), rows = first + n;
    }
    return Cuda(kc::AttendPrefill(s.attn.data(), nullptr, s.q16.data(), pos, k, v,
                                  kc::KvStrides::HeadMajor(rows, hd), seq.cache_->pos.data(), scale,
                                  n, first + n, c.n_heads, c.n_kv_heads, hd, s.stream),
                "prefill attention");
  };
  RETURN_IF_ERROR(Layers(n, pos, attend));
  const int64_t rows = all_logits ? n : 1;
  ASSIGN_OR_RETURN(std::vector<float> logits, Logits(n - rows, rows));
  seq.length_ += n;
  return logits;
}

absl::StatusOr<std::vector<float>> DeviceRunner::Decode(std::span<DeviceSequence* const> seqs,
                                                        std::span<const int32_t> tokens) {
  const auto m = static_cast<int64_t>(seqs.size());
  if (m == 0 || tokens.size() != seqs.size()) {
    return absl::InvalidArgumentError("a decode step takes one token for each sequence");
  }
  for (int64_t i = 0; i < m; ++i) {
    if (&seqs[i]->model_ != &model_) return absl::InvalidArgumentError("sequence of another model");
    if (seqs[i]->length_ >= seqs[i]->capacity_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("sequence ", i, " is full (capacity ", seqs[i]->capacity_, ")"));
    }
    for (int64_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) return absl::InvalidArgumentError("a sequence twice in one step");
    }
  }
  const ModelConfig& c = model_.model().config();
  Scratch& s = *scratch_;
  const int64_t H = c.n_heads, Hkv = c.n_kv_heads, hd = c.head_dim, group = H / Hkv;
  RETURN_IF_ERROR(Embed(tokens));

  // Positions, and per layer the queries of every (sequence, kv-head, ≤ 8 group heads) over
  // fp16 page views of its cache, the step's own entry included.
  std::vector<int32_t> pos(m), group_pos(m * group);
  std::vector<kc::PagedQuery> queries;
  std::vector<kernels::KvPageView> views;
  int64_t max_pages = 0;
  for (int64_t i = 0; i < m; ++i) {
    pos[i] = static_cast<int32_t>(seqs[i]->length_);
    std::fill_n(group_pos.begin() + i * group, group, pos[i]);
  }
  RETURN_IF_ERROR(Ensure(s.group_pos, m * group));  // queries point into it
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    for (int64_t i = 0; i < m; ++i) {
      const DeviceSequence& seq = *seqs[i];
      const int64_t n_kv = seq.length_ + 1, pages = (n_kv + kPageTokens - 1) / kPageTokens;
      max_pages = std::max(max_pages, pages);
      for (int64_t g = 0; g < Hkv; ++g) {
        const auto first = static_cast<int32_t>(views.size());
        const kc::KvCacheView cache = seqs[i]->cache_->View(layer);
        for (int64_t p = 0; p < pages; ++p) {
          views.push_back(cache.Page(g, p * kPageTokens,
                                     std::min(kPageTokens, n_kv - p * kPageTokens),
                                     seq.cache_->pos.data(), hd));
        }
        for (int64_t h0 = 0; h0 < group; h0 += kc::kMaxPagedRows) {
          const int64_t row = (i * H + g * group + h0) * hd;
          queries.push_back(
              {.out = s.attn.data() + row,
               .q = s.q.data() + row,
               .q_pos = s.group_pos.data() + i * group + h0,
               .n_q = static_cast<int32_t>(std::min<int64_t>(kc::kMaxPagedRows, group - h0)),
               .page_begin = first,
               .page_end = static_cast<int32_t>(views.size())});
        }
      }
    }
  }
  RETURN_IF_ERROR(CopyIn(s.pos, pos.data(), m, s.stream));
  RETURN_IF_ERROR(CopyIn(s.group_pos, group_pos.data(), m * group, s.stream));
  const int64_t per_layer = static_cast<int64_t>(queries.size()) / c.n_layers;
  RETURN_IF_ERROR(CopyIn(s.queries, queries.data(), queries.size(), s.stream));
  RETURN_IF_ERROR(CopyIn(s.views, views.data(), views.size(), s.stream));
  RETURN_IF_ERROR(Ensure(s.paged, kc::PagedScratchFloats(per_layer, max_pages, hd)));

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t kvd = Hkv * hd;
  auto attend = [&](int32_t layer) -> absl::Status {
    for (int64_t i = 0; i < m; ++i) {
      DeviceSequence& seq = *seqs[i];
      RETURN_IF_ERROR(Cuda(kc::AppendKv(seq.cache_->View(layer), s.k.data() + i * kvd,
                                        s.v.data() + i * kvd, 1, seq.length_, Hkv, hd, s.stream),
                           "append kv"));
    }
    return Cuda(
        kc::AttendPagedBatch(s.queries.data() + layer * per_layer, per_layer, s.views.data(),
                             max_pages, scale, hd, s.paged.data(), s.stream),
        "decode attention");
  };
  RETURN_IF_ERROR(Layers(m, s.pos.data(), attend));
  ASSIGN_OR_RETURN(std::vector<float> logits, Logits(0, m));
  for (DeviceSequence* seq : seqs) ++seq->length_;
  return logits;
}

}  // namespace glimpse::model::cuda

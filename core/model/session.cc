#include "core/model/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace glimpse::model {

// Activations of one chunk of n tokens. Buffers grow to the largest chunk seen and are reused.
struct Session::Scratch {
  std::vector<float> x;         // [n, D] residual stream
  std::vector<float> xn;        // [n, D] normalised input of a block
  std::vector<float> q;         // [n, H·hd]
  std::vector<float> k;         // [n, Hkv·hd]
  std::vector<float> v;         // [n, Hkv·hd]
  std::vector<float> attn;      // [n, H·hd] attention output
  std::vector<float> tmp;       // [n, D] block output before the residual add
  std::vector<float> gate;      // [n, F]
  std::vector<float> up;        // [n, F]
  std::vector<int32_t> pos;     // [n] positions of the chunk's tokens
  std::vector<float> q_pre;     // [n, H·hd] pre-RoPE q, only while an observer asks for it
  std::vector<float> lora_mid;  // [n, r] A x of the adapted rows, only with an adapter
  std::vector<float> lora_out;  // [n, out] B (A x) of the adapted rows, only with an adapter

  void Resize(const ModelConfig& c, int64_t n) {
    const int64_t qd = int64_t{c.n_heads} * c.head_dim;
    const int64_t kvd = int64_t{c.n_kv_heads} * c.head_dim;
    x.resize(n * c.hidden);
    xn.resize(n * c.hidden);
    q.resize(n * qd);
    k.resize(n * kvd);
    v.resize(n * kvd);
    attn.resize(n * qd);
    tmp.resize(n * c.hidden);
    gate.resize(n * c.ffn_hidden);
    up.resize(n * c.ffn_hidden);
    pos.resize(n);
  }
};

namespace {

std::vector<float> RopeInverseFrequencies(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  std::vector<float> inv_freq(c.head_dim / 2);
  for (int32_t i = 0; i < c.head_dim / 2; ++i) {
    double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
    if (w.rope_freq_factors != nullptr) f /= w.rope_freq_factors[i];
    inv_freq[i] = static_cast<float>(f);
  }
  return inv_freq;
}

}  // namespace

Session::Session(const Model& model, kernels::ThreadPool& pool, SessionOptions options)
    : model_(model),
      pool_(pool),
      options_(options),
      max_context_(options.max_context > 0 ? options.max_context : model.config().context_length),
      inv_freq_(RopeInverseFrequencies(model.weights())),
      cache_(model.config().n_layers, model.config().n_kv_heads, model.config().head_dim,
             options.kv_pool, options.kv_dtype),
      scratch_(std::make_unique<Scratch>()) {}

Session::~Session() = default;

void Session::Reset() {
  cache_.Clear();
  next_position_ = 0;
}

absl::Status Session::Resume(int32_t next_position) {
  if (next_position < 0 || next_position > max_context_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resume position %d is outside [0, %d] (the context)", next_position, max_context_));
  }
  for (int32_t layer = 0; layer < cache_.n_layers(); ++layer) {
    for (int32_t h = 0; h < cache_.n_kv_heads(); ++h) {
      const std::span<const int32_t> positions = cache_.positions(layer, h);
      if (!positions.empty() && positions.back() >= next_position) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "layer %d, kv_head %d holds position %d, not before the resume position %d", layer, h,
            positions.back(), next_position));
      }
    }
  }
  next_position_ = next_position;
  return absl::OkStatus();
}

absl::Status Session::ValidateLength(int64_t n) const {
  const int64_t end = int64_t{next_position_} + n;
  if (end > max_context_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sequence of %d tokens (%d already in the session + %d new) exceeds the context length %d",
        end, next_position_, n, max_context_));
  }
  return absl::OkStatus();
}

absl::Status Session::ValidateTokens(std::span<const int32_t> tokens) const {
  if (tokens.empty()) return absl::InvalidArgumentError("Forward() needs at least one token");
  const int32_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d at index %d is out of range [0, %d)", tokens[i], i, vocab));
    }
  }
  return ValidateLength(static_cast<int64_t>(tokens.size()));
}

absl::Status Session::ValidateLora(const LoraAdapter& lora) const {
  const ModelConfig& c = model_.config();
  if (static_cast<int32_t>(lora.layers.size()) != c.n_layers) {
    return absl::InvalidArgumentError(absl::StrFormat("LoRA adapter has %d layers, the model %d",
                                                      lora.layers.size(), c.n_layers));
  }
  struct Slot {
    const char* name;
    const LoraPair LoraLayer::*pair;
    const kernels::WeightView LayerWeights::*base;
  };
  static constexpr Slot kSlots[] = {{"q", &LoraLayer::q, &LayerWeights::wq},
                                    {"k", &LoraLayer::k, &LayerWeights::wk},
                                    {"v", &LoraLayer::v, &LayerWeights::wv},
                                    {"o", &LoraLayer::o, &LayerWeights::wo},
                                    {"gate", &LoraLayer::gate, &LayerWeights::w_gate},
                                    {"up", &LoraLayer::up, &LayerWeights::w_up},
                                    {"down", &LoraLayer::down, &LayerWeights::w_down}};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (const Slot& slot : kSlots) {
      const LoraPair& p = lora.layers[l].*slot.pair;
      const kernels::WeightView& w = model_.weights().layers[l].*slot.base;
      if (p.a.data == nullptr || p.b.data == nullptr || p.a.rows < 1 || p.a.cols != w.cols ||
          p.b.rows != w.rows || p.b.cols != p.a.rows) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "LoRA layer %d %s: A [%d, %d] and B [%d, %d] do not fit the projection [%d, %d]", l,
            slot.name, p.a.rows, p.a.cols, p.b.rows, p.b.cols, w.rows, w.cols));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Session::Forward(std::span<const int32_t> tokens,
                                                    bool all_logits, LayerObserver* observer) {
  RETURN_IF_ERROR(ValidateTokens(tokens));
  const int64_t vocab = model_.config().vocab_size;
  const int64_t total = static_cast<int64_t>(tokens.size());
  std::vector<float> logits((all_logits ? total : 1) * vocab);
  const int64_t chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  const std::vector<int64_t> sizes = HeadSizes();
  const int32_t start_position = next_position_;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    const bool last = begin + n == total;
    // Only the final chunk's last row is needed unless every row was asked for.
    float* out = all_logits ? logits.data() + begin * vocab : (last ? logits.data() : nullptr);
    scratch_->Resize(model_.config(), n);
    Embed(tokens.subspan(begin, n));
    if (absl::Status st = ForwardChunk(n, all_logits, out, observer, {}); !st.ok()) {
      Truncate(sizes, start_position);
      return st;
    }
  }
  return logits;
}

std::vector<int64_t> Session::HeadSizes() const {
  std::vector<int64_t> sizes;
  for (int32_t l = 0; l < cache_.n_layers(); ++l) {
    for (int32_t h = 0; h < cache_.n_kv_heads(); ++h) sizes.push_back(cache_.size(l, h));
  }
  return sizes;
}

absl::StatusOr<std::vector<float>> Session::ForwardEmbeddings(std::span<const float> embeddings,
                                                              const EmbeddingsCall& call) {
  const int64_t D = model_.config().hidden;
  if (embeddings.empty() || static_cast<int64_t>(embeddings.size()) % D != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ForwardEmbeddings() needs [n, %d] floats with n >= 1, got %d", D, embeddings.size()));
  }
  const int64_t total = static_cast<int64_t>(embeddings.size()) / D;
  RETURN_IF_ERROR(ValidateLength(total));
  if (call.lora != nullptr) RETURN_IF_ERROR(ValidateLora(*call.lora));
  const std::vector<int64_t> sizes = HeadSizes();  // entries per head before the call, to undo it
  const int32_t start_position = next_position_;
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits((call.all_logits ? total : 1) * vocab);
  const int64_t chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    const bool last = begin + n == total;
    float* out = call.all_logits ? logits.data() + begin * vocab : (last ? logits.data() : nullptr);
    scratch_->Resize(model_.config(), n);
    std::memcpy(scratch_->x.data(), embeddings.data() + begin * D, n * D * sizeof(float));
    const ChunkLora lora{call.lora, std::max<int64_t>(call.lora_first_row - begin, 0)};
    if (absl::Status st = ForwardChunk(n, call.all_logits, out, call.observer, lora); !st.ok()) {
      Truncate(sizes, start_position);
      return st;
    }
  }
  if (!call.keep_entries) Truncate(sizes, start_position);
  return logits;
}

void Session::Truncate(const std::vector<int64_t>& sizes, int32_t position) {
  size_t i = 0;
  for (int32_t l = 0; l < cache_.n_layers(); ++l) {
    for (int32_t h = 0; h < cache_.n_kv_heads(); ++h, ++i) cache_.Truncate(l, h, sizes[i]);
  }
  next_position_ = position;
}

absl::Status Session::ForwardChunk(int64_t n, bool all_logits, float* logits,
                                   LayerObserver* observer, const ChunkLora& lora) {
  for (int64_t i = 0; i < n; ++i) scratch_->pos[i] = next_position_ + static_cast<int32_t>(i);
  for (int32_t layer = 0; layer < model_.config().n_layers; ++layer) {
    RETURN_IF_ERROR(AttentionBlock(layer, n, observer, lora));
    FeedForwardBlock(layer, n, lora);
  }
  next_position_ += static_cast<int32_t>(n);
  if (logits != nullptr) Logits(n, all_logits, logits);
  return absl::OkStatus();
}

void Session::Embed(std::span<const int32_t> tokens) {
  const kernels::WeightView& e = model_.weights().token_embd;
  const int64_t row_bytes = kernels::RowBytes(e.type, e.cols);
  const auto* base = static_cast<const uint8_t*>(e.data);
  for (size_t i = 0; i < tokens.size(); ++i) {
    kernels::DequantizeRow(scratch_->x.data() + i * e.cols, base + tokens[i] * row_bytes, e.type,
                           e.cols);
  }
}

void Session::AddLora(float* out, const float* x, const LoraPair LoraLayer::*pair, int32_t layer,
                      int64_t n, const ChunkLora& lora) {
  if (lora.adapter == nullptr || lora.first_row >= n) return;
  const LoraPair& p = lora.adapter->layers[layer].*pair;
  Scratch& s = *scratch_;
  const int64_t r0 = lora.first_row, rows = n - r0;
  s.lora_mid.resize(rows * p.a.rows);
  s.lora_out.resize(rows * p.b.rows);
  kernels::MatMul(s.lora_mid.data(), x + r0 * p.a.cols, p.a, rows, pool_);  // [rows, r]
  kernels::MatMul(s.lora_out.data(), s.lora_mid.data(), p.b, rows, pool_);  // [rows, out]
  float* dst = out + r0 * p.b.rows;
  const float scale = lora.adapter->scale;
  for (int64_t i = 0; i < rows * p.b.rows; ++i) dst[i] += scale * s.lora_out[i];
}

absl::Status Session::AttentionBlock(int32_t layer, int64_t n, LayerObserver* observer,
                                     const ChunkLora& lora) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.attn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.q.data(), s.xn.data(), w.wq, n, pool_);
  kernels::MatMul(s.k.data(), s.xn.data(), w.wk, n, pool_);
  kernels::MatMul(s.v.data(), s.xn.data(), w.wv, n, pool_);
  AddLora(s.q.data(), s.xn.data(), &LoraLayer::q, layer, n, lora);
  AddLora(s.k.data(), s.xn.data(), &LoraLayer::k, layer, n, lora);
  AddLora(s.v.data(), s.xn.data(), &LoraLayer::v, layer, n, lora);
  if (w.bq != nullptr) kernels::AddBias(s.q.data(), w.bq, n, w.wq.rows);
  if (w.bk != nullptr) kernels::AddBias(s.k.data(), w.bk, n, w.wk.rows);
  if (w.bv != nullptr) kernels::AddBias(s.v.data(), w.bv, n, w.wv.rows);
  if (w.q_norm != nullptr) {
    kernels::RmsNorm(s.q.data(), s.q.data(), w.q_norm, c.rms_eps, n * c.n_heads, c.head_dim);
  }
  if (w.k_norm != nullptr) {
    kernels::RmsNorm(s.k.data(), s.k.data(), w.k_norm, c.rms_eps, n * c.n_kv_heads, c.head_dim);
  }
  const bool pre_rope = observer != nullptr && observer->wants_pre_rope_queries();
  if (pre_rope) s.q_pre.assign(s.q.begin(), s.q.begin() + n * c.n_heads * c.head_dim);
  kernels::Rope(s.q.data(), s.pos.data(), inv_freq_.data(), c.rope_style, n, c.n_heads, c.head_dim);
  kernels::Rope(s.k.data(), s.pos.data(), inv_freq_.data(), c.rope_style, n, c.n_kv_heads,
                c.head_dim);
  RETURN_IF_ERROR(Attend(layer, n));
  if (observer != nullptr) {
    observer->OnLayer(layer, {.n_tokens = n,
                              .positions = s.pos.data(),
                              .xn = s.xn.data(),
                              .pre_rope_q = pre_rope ? s.q_pre.data() : nullptr,
                              .q = s.q.data(),
                              .k = s.k.data(),
                              .v = s.v.data()});
  }
  kernels::MatMul(s.tmp.data(), s.attn.data(), w.wo, n, pool_);
  AddLora(s.tmp.data(), s.attn.data(), &LoraLayer::o, layer, n, lora);
  kernels::Add(s.x.data(), s.tmp.data(), n * c.hidden);
  return absl::OkStatus();
}

// Appends the chunk's K/V to each head's pages, then runs every query head of the chunk against
// the entries its kv-head holds, read from the pages as stored. Work items are (kv-head, block of
// query rows) so both threads stay busy even with 3 kv-heads.
absl::Status Session::Attend(int32_t layer, int64_t n) {
  const ModelConfig& c = model_.config();
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim;
  const int64_t group = c.n_heads / c.n_kv_heads;
  std::vector<float> head_k(n * hd), head_v(n * hd);
  std::vector<std::vector<kernels::KvPageView>> pages(c.n_kv_heads);
  for (int32_t h = 0; h < c.n_kv_heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(&head_k[t * hd], &s.k[(t * c.n_kv_heads + h) * hd], hd * sizeof(float));
      std::memcpy(&head_v[t * hd], &s.v[(t * c.n_kv_heads + h) * hd], hd * sizeof(float));
    }
    RETURN_IF_ERROR(cache_.Append(layer, h, head_k.data(), head_v.data(), s.pos.data(), n));
  }
  for (int32_t h = 0; h < c.n_kv_heads; ++h) pages[h] = cache_.Pages(layer, h);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr int64_t kRowsPerItem = 16;  // query tokens per work item
  const int64_t blocks = (n + kRowsPerItem - 1) / kRowsPerItem;
  pool_.ParallelFor(c.n_kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_rows, out_rows;
    std::vector<int32_t> q_pos;
    for (int64_t item = begin; item < end; ++item) {
      const int32_t h = static_cast<int32_t>(item / blocks);
      const int64_t t0 = (item % blocks) * kRowsPerItem;
      const int64_t t1 = std::min(n, t0 + kRowsPerItem);
      // Gather the group's query heads for tokens [t0, t1) as rows [(t, g), hd].
      const int64_t rows = (t1 - t0) * group;
      q_rows.resize(rows * hd);
      out_rows.resize(rows * hd);
      q_pos.resize(rows);
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&q_rows[r * hd], &s.q[(t * c.n_heads + h * group + g) * hd],
                      hd * sizeof(float));
          q_pos[r] = s.pos[t];
        }
      }
      kernels::AttendPaged(out_rows.data(), q_rows.data(), q_pos.data(), pages[h], scale, rows,
                           hd);
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&s.attn[(t * c.n_heads + h * group + g) * hd], &out_rows[r * hd],
                      hd * sizeof(float));
        }
      }
    }
  });
  return absl::OkStatus();
}

void Session::FeedForwardBlock(int32_t layer, int64_t n, const ChunkLora& lora) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.ffn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.gate.data(), s.xn.data(), w.w_gate, n, pool_);
  kernels::MatMul(s.up.data(), s.xn.data(), w.w_up, n, pool_);
  AddLora(s.gate.data(), s.xn.data(), &LoraLayer::gate, layer, n, lora);
  AddLora(s.up.data(), s.xn.data(), &LoraLayer::up, layer, n, lora);
  kernels::SiluMul(s.gate.data(), s.gate.data(), s.up.data(), n * c.ffn_hidden);
  kernels::MatMul(s.tmp.data(), s.gate.data(), w.w_down, n, pool_);
  AddLora(s.tmp.data(), s.gate.data(), &LoraLayer::down, layer, n, lora);
  kernels::Add(s.x.data(), s.tmp.data(), n * c.hidden);
}

void Session::Logits(int64_t n, bool all_logits, float* logits) {
  const ModelConfig& c = model_.config();
  Scratch& s = *scratch_;
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  kernels::RmsNorm(s.xn.data(), s.x.data() + first * c.hidden, model_.weights().output_norm,
                   c.rms_eps, rows, c.hidden);
  kernels::MatMul(logits, s.xn.data(), model_.weights().output, rows, pool_);
}

}  // namespace glimpse::model

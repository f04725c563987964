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
  std::vector<float> x;      // [n, D] residual stream
  std::vector<float> xn;     // [n, D] normalised input of a block
  std::vector<float> q;      // [n, H·hd]
  std::vector<float> k;      // [n, Hkv·hd]
  std::vector<float> v;      // [n, Hkv·hd]
  std::vector<float> attn;   // [n, H·hd] attention output
  std::vector<float> tmp;    // [n, D] block output before the residual add
  std::vector<float> gate;   // [n, F]
  std::vector<float> up;     // [n, F]
  std::vector<int32_t> pos;  // [n] positions of the chunk's tokens
  std::vector<float> q_pre;  // [n, H·hd] pre-RoPE q, only while an observer asks for it

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
      cache_(model.config().n_layers, model.config().n_kv_heads, model.config().head_dim),
      scratch_(std::make_unique<Scratch>()) {}

Session::~Session() = default;

void Session::Reset() {
  cache_.Clear();
  next_position_ = 0;
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
  const int64_t end = int64_t{next_position_} + static_cast<int64_t>(tokens.size());
  if (end > max_context_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sequence of %d tokens (%d already in the session + %d new) exceeds the context length %d",
        end, next_position_, tokens.size(), max_context_));
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
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    const bool last = begin + n == total;
    // Only the final chunk's last row is needed unless every row was asked for.
    float* out = all_logits ? logits.data() + begin * vocab : (last ? logits.data() : nullptr);
    ForwardChunk(tokens.subspan(begin, n), all_logits, out, observer);
  }
  return logits;
}

void Session::ForwardChunk(std::span<const int32_t> tokens, bool all_logits, float* logits,
                           LayerObserver* observer) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  scratch_->Resize(model_.config(), n);
  for (int64_t i = 0; i < n; ++i) scratch_->pos[i] = next_position_ + static_cast<int32_t>(i);
  Embed(tokens);
  for (int32_t layer = 0; layer < model_.config().n_layers; ++layer) {
    AttentionBlock(layer, n, observer);
    FeedForwardBlock(layer, n);
  }
  next_position_ += static_cast<int32_t>(n);
  if (logits != nullptr) Logits(n, all_logits, logits);
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

void Session::AttentionBlock(int32_t layer, int64_t n, LayerObserver* observer) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.attn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.q.data(), s.xn.data(), w.wq, n, pool_);
  kernels::MatMul(s.k.data(), s.xn.data(), w.wk, n, pool_);
  kernels::MatMul(s.v.data(), s.xn.data(), w.wv, n, pool_);
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
  Attend(layer, n);
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
  kernels::Add(s.x.data(), s.tmp.data(), n * c.hidden);
}

// Appends the chunk's K/V to each head's ragged list, then runs every query head of the chunk
// against the entries its kv-head holds. Work items are (kv-head, block of query rows) so both
// threads stay busy even with 3 kv-heads.
void Session::Attend(int32_t layer, int64_t n) {
  const ModelConfig& c = model_.config();
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim;
  const int64_t group = c.n_heads / c.n_kv_heads;
  std::vector<float> head_k(n * hd), head_v(n * hd);
  for (int32_t h = 0; h < c.n_kv_heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(&head_k[t * hd], &s.k[(t * c.n_kv_heads + h) * hd], hd * sizeof(float));
      std::memcpy(&head_v[t * hd], &s.v[(t * c.n_kv_heads + h) * hd], hd * sizeof(float));
    }
    cache_.Append(layer, h, head_k.data(), head_v.data(), s.pos.data(), n);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr int64_t kRowsPerItem = 16;  // query tokens per work item
  const int64_t blocks = (n + kRowsPerItem - 1) / kRowsPerItem;
  pool_.ParallelFor(c.n_kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_rows, out_rows, scores;
    std::vector<int32_t> q_pos;
    for (int64_t item = begin; item < end; ++item) {
      const int32_t h = static_cast<int32_t>(item / blocks);
      const int64_t t0 = (item % blocks) * kRowsPerItem;
      const int64_t t1 = std::min(n, t0 + kRowsPerItem);
      const KvHead& kv = cache_.head(layer, h);
      // Gather the group's query heads for tokens [t0, t1) as rows [(t, g), hd].
      const int64_t rows = (t1 - t0) * group;
      q_rows.resize(rows * hd);
      out_rows.resize(rows * hd);
      q_pos.resize(rows);
      scores.resize(kv.size());
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&q_rows[r * hd], &s.q[(t * c.n_heads + h * group + g) * hd],
                      hd * sizeof(float));
          q_pos[r] = s.pos[t];
        }
      }
      kernels::AttendRagged(out_rows.data(), q_rows.data(), q_pos.data(), kv.keys.data(),
                            kv.values.data(), kv.positions.data(), scale, scores.data(), rows,
                            kv.size(), hd);
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&s.attn[(t * c.n_heads + h * group + g) * hd], &out_rows[r * hd],
                      hd * sizeof(float));
        }
      }
    }
  });
}

void Session::FeedForwardBlock(int32_t layer, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.ffn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.gate.data(), s.xn.data(), w.w_gate, n, pool_);
  kernels::MatMul(s.up.data(), s.xn.data(), w.w_up, n, pool_);
  kernels::SiluMul(s.gate.data(), s.gate.data(), s.up.data(), n * c.ffn_hidden);
  kernels::MatMul(s.tmp.data(), s.gate.data(), w.w_down, n, pool_);
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

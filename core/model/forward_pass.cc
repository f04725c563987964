#include "core/model/forward_pass.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace glimpse::model {
namespace {

thread_local ChunkHook* current_chunk_hook = nullptr;
thread_local bool running_chunk_hook = false;

}  // namespace

ChunkHook::ChunkHook(Fn fn) : fn_(std::move(fn)), outer_(current_chunk_hook) {
  current_chunk_hook = this;
}

ChunkHook::~ChunkHook() { current_chunk_hook = outer_; }

absl::StatusOr<PassOutputs> ChunkHook::Run(std::span<const BatchRows> chunk, const RunRows& run) {
  if (current_chunk_hook == nullptr || running_chunk_hook) return run(chunk);
  running_chunk_hook = true;
  absl::StatusOr<PassOutputs> out = current_chunk_hook->fn_(chunk, run);
  running_chunk_hook = false;
  return out;
}

// Activations of one pass over n rows (all items). Buffers grow to the largest pass and are reused.
struct ForwardPass::Scratch {
  std::vector<float> x;         // [n, D] residual stream
  std::vector<float> xn;        // [n, D] normalised input of a block
  std::vector<float> q;         // [n, H·hd]
  std::vector<float> k;         // [n, Hkv·hd]
  std::vector<float> v;         // [n, Hkv·hd]
  std::vector<float> attn;      // [n, H·hd] attention output
  std::vector<float> tmp;       // [n, D] block output before the residual add
  std::vector<float> gate;      // [n, F]
  std::vector<float> up;        // [n, F]
  std::vector<int32_t> pos;     // [n] each row's position in its sequence
  std::vector<float> q_pre;     // [n, H·hd] pre-RoPE q, only while an observer asks for it
  std::vector<float> lora_mid;  // [rows, r] A x of one item's adapted rows
  std::vector<float> lora_out;  // [rows, out] B (A x)

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

// One item's place in the pass.
struct ForwardPass::Item {
  const BatchRows* rows = nullptr;
  Sequence* sequence = nullptr;
  int64_t begin = 0;  // its first row in the pass
  int64_t n = 0;
  std::vector<int64_t> sizes;  // entries per head before the pass, to undo it
};

ForwardPass::ForwardPass(const Model& model, kernels::ThreadPool& pool)
    : model_(model), pool_(pool), scratch_(std::make_unique<Scratch>()) {}

ForwardPass::~ForwardPass() = default;

absl::Status ForwardPass::Check(std::span<const BatchRows> items) const {
  const int64_t D = model_.config().hidden;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchRows& r = items[i];
    if (r.sequence == nullptr || &r.sequence->model() != &model_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("batch item %d has no sequence of this pass's model", i));
    }
    for (size_t j = 0; j < i; ++j) {
      if (items[j].sequence == r.sequence) {
        return absl::InvalidArgumentError(
            absl::StrFormat("batch items %d and %d are the same sequence", j, i));
      }
    }
    if (r.tokens.empty() == r.embeddings.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("batch item %d needs token ids or input embeddings (one of them)", i));
    }
    if (!r.tokens.empty()) {
      RETURN_IF_ERROR(r.sequence->ValidateTokens(r.tokens));
    } else {
      if (static_cast<int64_t>(r.embeddings.size()) % D != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("ForwardEmbeddings() needs [n, %d] floats with n >= 1, got %d", D,
                            r.embeddings.size()));
      }
      RETURN_IF_ERROR(r.sequence->ValidateLength(static_cast<int64_t>(r.embeddings.size()) / D));
    }
    if (r.call.lora != nullptr) RETURN_IF_ERROR(r.sequence->ValidateLora(*r.call.lora));
  }
  return absl::OkStatus();
}

void ForwardPass::Embed(std::span<const Item> items) {
  const int64_t D = model_.config().hidden;
  for (const Item& it : items) {
    float* x = scratch_->x.data() + it.begin * D;
    if (it.rows->embeddings.empty()) {
      model_.EmbedTokens(it.rows->tokens, x);
    } else {
      std::memcpy(x, it.rows->embeddings.data(), it.n * D * sizeof(float));
    }
  }
}

absl::StatusOr<PassOutputs> ForwardPass::Run(std::span<const BatchRows> items) {
  RETURN_IF_ERROR(Check(items));
  const ModelConfig& c = model_.config();
  const int64_t D = c.hidden;
  std::vector<Item> plan(items.size());
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = plan[i];
    it.rows = &items[i];
    it.sequence = items[i].sequence;
    it.begin = total;
    it.n = items[i].tokens.empty() ? static_cast<int64_t>(items[i].embeddings.size()) / D
                                   : static_cast<int64_t>(items[i].tokens.size());
    it.sizes = it.sequence->HeadSizes();
    total += it.n;
  }
  scratch_->Resize(c, total);
  for (const Item& it : plan) {
    for (int64_t i = 0; i < it.n; ++i) {
      scratch_->pos[it.begin + i] = it.sequence->next_position() + static_cast<int32_t>(i);
    }
  }
  Embed(plan);
  absl::Status status;
  for (int32_t layer = 0; layer < c.n_layers && status.ok(); ++layer) {
    status = AttentionBlock(layer, plan);
    if (status.ok()) FeedForwardBlock(layer, plan);
  }
  if (!status.ok()) {
    for (const Item& it : plan) it.sequence->Truncate(it.sizes, it.sequence->next_position());
    return status;
  }
  PassOutputs logits(plan.size());
  Logits(plan, logits);
  for (const Item& it : plan) {
    if (it.rows->call.keep_entries) {
      it.sequence->next_position_ += static_cast<int32_t>(it.n);
    } else {
      it.sequence->Truncate(it.sizes, it.sequence->next_position());
    }
  }
  return logits;
}

void ForwardPass::AddLora(float* out, const float* x, const LoraPair LoraLayer::*pair,
                          int32_t layer, std::span<const Item> items) {
  Scratch& s = *scratch_;
  for (const Item& it : items) {
    const EmbeddingsCall& call = it.rows->call;
    if (call.lora == nullptr || call.lora_first_row >= it.n) continue;
    const LoraPair& p = call.lora->layers[layer].*pair;
    const int64_t r0 = it.begin + std::max<int64_t>(call.lora_first_row, 0);
    const int64_t rows = it.begin + it.n - r0;
    s.lora_mid.resize(rows * p.a.rows);
    s.lora_out.resize(rows * p.b.rows);
    kernels::MatMul(s.lora_mid.data(), x + r0 * p.a.cols, p.a, rows, pool_);  // [rows, r]
    kernels::MatMul(s.lora_out.data(), s.lora_mid.data(), p.b, rows, pool_);  // [rows, out]
    float* dst = out + r0 * p.b.rows;
    const float scale = call.lora->scale;
    for (int64_t i = 0; i < rows * p.b.rows; ++i) dst[i] += scale * s.lora_out[i];
  }
}

absl::Status ForwardPass::AttentionBlock(int32_t layer, std::span<const Item> items) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  const int64_t n = static_cast<int64_t>(s.pos.size());
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.attn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.q.data(), s.xn.data(), w.wq, n, pool_);
  kernels::MatMul(s.k.data(), s.xn.data(), w.wk, n, pool_);
  kernels::MatMul(s.v.data(), s.xn.data(), w.wv, n, pool_);
  AddLora(s.q.data(), s.xn.data(), &LoraLayer::q, layer, items);
  AddLora(s.k.data(), s.xn.data(), &LoraLayer::k, layer, items);
  AddLora(s.v.data(), s.xn.data(), &LoraLayer::v, layer, items);
  if (w.bq != nullptr) kernels::AddBias(s.q.data(), w.bq, n, w.wq.rows);
  if (w.bk != nullptr) kernels::AddBias(s.k.data(), w.bk, n, w.wk.rows);
  if (w.bv != nullptr) kernels::AddBias(s.v.data(), w.bv, n, w.wv.rows);
  if (w.q_norm != nullptr) {
    kernels::RmsNorm(s.q.data(), s.q.data(), w.q_norm, c.rms_eps, n * c.n_heads, c.head_dim);
  }
  if (w.k_norm != nullptr) {
    kernels::RmsNorm(s.k.data(), s.k.data(), w.k_norm, c.rms_eps, n * c.n_kv_heads, c.head_dim);
  }
  const bool pre_rope = std::any_of(items.begin(), items.end(), [](const Item& it) {
    return it.rows->call.observer != nullptr && it.rows->call.observer->wants_pre_rope_queries();
  });
  if (pre_rope) s.q_pre.assign(s.q.begin(), s.q.begin() + n * c.n_heads * c.head_dim);
  const float* inv_freq = items.front().sequence->rope_inv_freq().data();
  kernels::Rope(s.q.data(), s.pos.data(), inv_freq, c.rope_style, n, c.n_heads, c.head_dim);
  kernels::Rope(s.k.data(), s.pos.data(), inv_freq, c.rope_style, n, c.n_kv_heads, c.head_dim);
  RETURN_IF_ERROR(Attend(layer, items));
  const int64_t qd = int64_t{c.n_heads} * c.head_dim, kvd = int64_t{c.n_kv_heads} * c.head_dim;
  for (const Item& it : items) {
    LayerObserver* observer = it.rows->call.observer;
    if (observer == nullptr) continue;
    observer->OnLayer(
        layer, {.n_tokens = it.n,
                .positions = s.pos.data() + it.begin,
                .xn = s.xn.data() + it.begin * c.hidden,
                .pre_rope_q =
                    observer->wants_pre_rope_queries() ? s.q_pre.data() + it.begin * qd : nullptr,
                .q = s.q.data() + it.begin * qd,
                .k = s.k.data() + it.begin * kvd,
                .v = s.v.data() + it.begin * kvd});
  }
  kernels::MatMul(s.tmp.data(), s.attn.data(), w.wo, n, pool_);
  AddLora(s.tmp.data(), s.attn.data(), &LoraLayer::o, layer, items);
  kernels::Add(s.x.data(), s.tmp.data(), n * c.hidden);
  return absl::OkStatus();
}

// Appends each item's K/V to its sequence's pages, then runs every query head of every item against
// the entries its kv-head holds, read from the pages as stored. Work items are (item, kv-head,
// block of 16 query rows), so both threads stay busy even with 3 kv-heads and one sequence.
absl::Status ForwardPass::Attend(int32_t layer, std::span<const Item> items) {
  const ModelConfig& c = model_.config();
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim, Hkv = c.n_kv_heads;
  const int64_t group = c.n_heads / c.n_kv_heads;
  std::vector<std::vector<kernels::KvPageView>> pages(items.size() * Hkv);
  std::vector<float> head_k, head_v;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    head_k.resize(it.n * hd);
    head_v.resize(it.n * hd);
    KvCache& cache = it.sequence->cache();
    for (int32_t h = 0; h < Hkv; ++h) {
      for (int64_t t = 0; t < it.n; ++t) {
        const int64_t row = it.begin + t;
        std::memcpy(&head_k[t * hd], &s.k[(row * Hkv + h) * hd], hd * sizeof(float));
        std::memcpy(&head_v[t * hd], &s.v[(row * Hkv + h) * hd], hd * sizeof(float));
      }
      RETURN_IF_ERROR(
          cache.Append(layer, h, head_k.data(), head_v.data(), s.pos.data() + it.begin, it.n));
    }
    for (int32_t h = 0; h < Hkv; ++h) pages[i * Hkv + h] = cache.Pages(layer, h);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr int64_t kRowsPerItem = 16;           // query tokens per work item
  std::vector<std::pair<size_t, int64_t>> work;  // (item, first token of the block)
  for (size_t i = 0; i < items.size(); ++i) {
    for (int64_t t0 = 0; t0 < items[i].n; t0 += kRowsPerItem) work.emplace_back(i, t0);
  }
  pool_.ParallelFor(static_cast<int64_t>(work.size()) * Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_rows, out_rows;
    std::vector<int32_t> q_pos;
    for (int64_t w = begin; w < end; ++w) {
      const auto [i, t0] = work[w / Hkv];
      const int32_t h = static_cast<int32_t>(w % Hkv);
      const Item& it = items[i];
      const int64_t t1 = std::min(it.n, t0 + kRowsPerItem);
      // Gather the group's query heads for tokens [t0, t1) as rows [(t, g), hd].
      const int64_t rows = (t1 - t0) * group;
      q_rows.resize(rows * hd);
      out_rows.resize(rows * hd);
      q_pos.resize(rows);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = it.begin + t;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&q_rows[r * hd], &s.q[(row * c.n_heads + h * group + g) * hd],
                      hd * sizeof(float));
          q_pos[r] = s.pos[row];
        }
      }
      kernels::AttendPaged(out_rows.data(), q_rows.data(), q_pos.data(), pages[i * Hkv + h], scale,
                           rows, hd);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = it.begin + t;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (t - t0) * group + g;
          std::memcpy(&s.attn[(row * c.n_heads + h * group + g) * hd], &out_rows[r * hd],
                      hd * sizeof(float));
        }
      }
    }
  });
  return absl::OkStatus();
}

void ForwardPass::FeedForwardBlock(int32_t layer, std::span<const Item> items) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[layer];
  Scratch& s = *scratch_;
  const int64_t n = static_cast<int64_t>(s.pos.size());
  kernels::RmsNorm(s.xn.data(), s.x.data(), w.ffn_norm, c.rms_eps, n, c.hidden);
  kernels::MatMul(s.gate.data(), s.xn.data(), w.w_gate, n, pool_);
  kernels::MatMul(s.up.data(), s.xn.data(), w.w_up, n, pool_);
  AddLora(s.gate.data(), s.xn.data(), &LoraLayer::gate, layer, items);
  AddLora(s.up.data(), s.xn.data(), &LoraLayer::up, layer, items);
  kernels::SiluMul(s.gate.data(), s.gate.data(), s.up.data(), n * c.ffn_hidden);
  kernels::MatMul(s.tmp.data(), s.gate.data(), w.w_down, n, pool_);
  AddLora(s.tmp.data(), s.gate.data(), &LoraLayer::down, layer, items);
  kernels::Add(s.x.data(), s.tmp.data(), n * c.hidden);
}

// The rows whose logits are wanted (each item's last, or all of an item's with all_logits), normed
// and multiplied by the output matrix in one product.
void ForwardPass::Logits(std::span<const Item> items, PassOutputs& out) {
  const ModelConfig& c = model_.config();
  Scratch& s = *scratch_;
  const int64_t D = c.hidden, vocab = c.vocab_size;
  std::vector<int64_t> rows;  // rows of the pass, in item order
  for (const Item& it : items) {
    for (int64_t r = it.rows->call.all_logits ? 0 : it.n - 1; r < it.n; ++r) {
      rows.push_back(it.begin + r);
    }
  }
  const int64_t m = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(&s.tmp[i * D], &s.x[rows[i] * D], D * sizeof(float));
  }
  kernels::RmsNorm(s.xn.data(), s.tmp.data(), model_.weights().output_norm, c.rms_eps, m, D);
  std::vector<float> logits(m * vocab);
  kernels::MatMul(logits.data(), s.xn.data(), model_.weights().output, m, pool_);
  int64_t at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t k = items[i].rows->call.all_logits ? items[i].n : 1;
    out[i].assign(logits.begin() + at * vocab, logits.begin() + (at + k) * vocab);
    at += k;
  }
}

}  // namespace glimpse::model

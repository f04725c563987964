#include "core/model/sequence.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/model/forward_pass.h"

namespace glimpse::model {

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

Sequence::Sequence(const Model& model, kernels::ThreadPool& pool, SequenceOptions options)
    : model_(model),
      pool_(pool),
      options_(options),
      max_context_(options.max_context > 0 ? options.max_context : model.config().context_length),
      inv_freq_(RopeInverseFrequencies(model.weights())),
      cache_(model.config().n_layers, model.config().n_kv_heads, model.config().head_dim,
             options.kv_pool, options.kv_dtype),
      pass_(std::make_unique<ForwardPass>(model, pool)) {}

Sequence::~Sequence() = default;

void Sequence::Reset() {
  cache_.Clear();
  next_position_ = 0;
}

absl::Status Sequence::Resume(int32_t next_position) {
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

absl::Status Sequence::ValidateLength(int64_t n) const {
  const int64_t end = int64_t{next_position_} + n;
  if (end > max_context_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sequence of %d tokens (%d already in the sequence + %d new) exceeds the context length %d",
        end, next_position_, n, max_context_));
  }
  return absl::OkStatus();
}

absl::Status Sequence::ValidateTokens(std::span<const int32_t> tokens) const {
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

absl::Status Sequence::ValidateLora(const LoraAdapter& lora) const {
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

absl::StatusOr<std::vector<float>> Sequence::Forward(std::span<const int32_t> tokens,
                                                     bool all_logits, LayerObserver* observer) {
  RETURN_IF_ERROR(ValidateTokens(tokens));
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  const RunRows run = [this](std::span<const BatchRows> rows) { return pass_->Run(rows); };
  const std::vector<int64_t> sizes = HeadSizes();
  const int32_t start_position = next_position_;
  std::vector<float> logits;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    const BatchRows rows{.sequence = this,
                         .tokens = tokens.subspan(begin, n),
                         .call = {.all_logits = all_logits, .observer = observer}};
    absl::StatusOr<PassOutputs> out = ChunkHook::Run(std::span(&rows, 1), run);
    if (!out.ok()) {
      Truncate(sizes, start_position);
      return out.status();
    }
    // Only the final chunk's last row is needed unless every row was asked for.
    if (all_logits || begin + n == total)
      logits.insert(logits.end(), (*out)[0].begin(), (*out)[0].end());
  }
  return logits;
}

std::vector<int64_t> Sequence::HeadSizes() const {
  std::vector<int64_t> sizes;
  for (int32_t l = 0; l < cache_.n_layers(); ++l) {
    for (int32_t h = 0; h < cache_.n_kv_heads(); ++h) sizes.push_back(cache_.size(l, h));
  }
  return sizes;
}

absl::StatusOr<std::vector<float>> Sequence::ForwardEmbeddings(std::span<const float> embeddings,
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
  const int64_t chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  const RunRows run = [this](std::span<const BatchRows> rows) { return pass_->Run(rows); };
  std::vector<float> logits;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    // Chunks keep their entries so that later rows of the call see earlier ones; without
    // keep_entries the call's entries go when it returns.
    EmbeddingsCall chunk_call = call;
    chunk_call.lora_first_row = std::max<int64_t>(call.lora_first_row - begin, 0);
    chunk_call.keep_entries = true;
    const BatchRows rows{
        .sequence = this, .embeddings = embeddings.subspan(begin * D, n * D), .call = chunk_call};
    absl::StatusOr<PassOutputs> out = ChunkHook::Run(std::span(&rows, 1), run);
    if (!out.ok()) {
      Truncate(sizes, start_position);
      return out.status();
    }
    if (call.all_logits || begin + n == total) {
      logits.insert(logits.end(), (*out)[0].begin(), (*out)[0].end());
    }
  }
  if (!call.keep_entries) Truncate(sizes, start_position);
  return logits;
}

void Sequence::Truncate(const std::vector<int64_t>& sizes, int32_t position) {
  size_t i = 0;
  for (int32_t l = 0; l < cache_.n_layers(); ++l) {
    for (int32_t h = 0; h < cache_.n_kv_heads(); ++h, ++i) cache_.Truncate(l, h, sizes[i]);
  }
  next_position_ = position;
}

}  // namespace glimpse::model

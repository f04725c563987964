// A loaded model: weights (mapped), tokenizer and fingerprint. Immutable and thread-safe after
// Load(); any number of Sequences may share one Model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/weights.h"

namespace glimpse::model {

class Model {
 public:
  // Loads a GGUF file, or a Hugging Face checkpoint directory (config.json, model.safetensors or
  // its shards, tokenizer.json), with a progress bar on a terminal. Errors name the file and what
  // was wrong: missing file, corrupt header, unsupported tensor type or architecture.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);

  const ModelConfig& config() const { return weights_->weights().config; }
  const ModelWeights& weights() const { return weights_->weights(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& fingerprint() const { return fingerprint_; }
  // The input embeddings of `tokens` as fp32 rows [tokens.size(), D] into `out`, dequantised
  // from the embedding table (the forward pass's own lookup). Ids must be in [0, vocab_size)
  // (Sequence::Forward checks them; this does not).
  void EmbedTokens(std::span<const int32_t> tokens, float* out) const;

 private:
  Model() = default;

  std::unique_ptr<WeightSource> weights_;  // also owns the parsed GGUF
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string fingerprint_;
};

}  // namespace glimpse::model

#include "core/model/model.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "kernels/quant.h"

namespace glimpse::model {
namespace {

void ReportProgress(int64_t done, int64_t total, void* arg) {
  auto* bar = static_cast<std::unique_ptr<ProgressBar>*>(arg);
  if (*bar == nullptr) *bar = std::make_unique<ProgressBar>("loading model", total);
  (*bar)->Update(done);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto model = std::unique_ptr<Model>(new Model());
  // Loader errors already name the file.
  if (std::filesystem::is_directory(path)) {
    ASSIGN_OR_RETURN(model->weights_, LoadSafetensorsWeights(path));
    ASSIGN_OR_RETURN(model->tokenizer_, Tokenizer::FromHfDirectory(path));
  } else {
    std::unique_ptr<ProgressBar> bar;
    ASSIGN_OR_RETURN(model->weights_, LoadGgufWeights(path, &ReportProgress, &bar));
    if (bar != nullptr) bar->Done();
    auto tokenizer = Tokenizer::FromGguf(*model->weights_->gguf());
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat(path, ": ", tokenizer.status().message()));
    }
    model->tokenizer_ = *std::move(tokenizer);
  }
  // Embedding tables may be padded past the tokenizer's vocabulary (Qwen), never the reverse.
  if (model->tokenizer_->vocab_size() > model->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tokenizer has ", model->tokenizer_->vocab_size(),
        " tokens but the embedding table has only ", model->config().vocab_size, " rows"));
  }
  model->fingerprint_ = model->weights_->fingerprint();
  const ModelConfig& c = model->config();
  log::Info("model loaded", {{"path", path},
                             {"architecture", c.architecture},
                             {"layers", static_cast<long long>(c.n_layers)},
                             {"hidden", static_cast<long long>(c.hidden)},
                             {"fingerprint", model->fingerprint_}});
  return model;
}

void Model::EmbedTokens(std::span<const int32_t> tokens, float* out) const {
  const kernels::WeightView& e = weights().token_embd;
  const int64_t row_bytes = kernels::RowBytes(e.type, e.cols);
  const auto* base = static_cast<const uint8_t*>(e.data);
  for (size_t i = 0; i < tokens.size(); ++i) {
    kernels::DequantizeRow(out + i * e.cols, base + tokens[i] * row_bytes, e.type, e.cols);
  }
}

}  // namespace glimpse::model

#include "core/model/model.h"

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"

namespace glimpse::model {
namespace {

void ReportProgress(int64_t done, int64_t total, void* arg) {
  auto* bar = static_cast<std::unique_ptr<ProgressBar>*>(arg);
  if (*bar == nullptr) *bar = std::make_unique<ProgressBar>("loading model", total);
  (*bar)->Update(done);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& gguf_path) {
  auto model = std::unique_ptr<Model>(new Model());
  std::unique_ptr<ProgressBar> bar;
  // Loader errors already name the file.
  ASSIGN_OR_RETURN(model->weights_, LoadGgufWeights(gguf_path, &ReportProgress, &bar));
  if (bar != nullptr) bar->Done();

  const GgufFile* gguf = model->weights_->gguf();
  auto tokenizer = Tokenizer::FromGguf(*gguf);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(gguf_path, ": ", tokenizer.status().message()));
  }
  model->tokenizer_ = *std::move(tokenizer);
  if (model->tokenizer_->vocab_size() != model->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf_path, ": tokenizer has ", model->tokenizer_->vocab_size(),
        " tokens but token_embd has ", model->config().vocab_size, " rows"));
  }
  model->fingerprint_ = model->weights_->fingerprint();
  const ModelConfig& c = model->config();
  log::Info("model loaded", {{"path", gguf_path},
                             {"architecture", c.architecture},
                             {"layers", static_cast<long long>(c.n_layers)},
                             {"hidden", static_cast<long long>(c.hidden)},
                             {"fingerprint", model->fingerprint_}});
  return model;
}

}  // namespace glimpse::model

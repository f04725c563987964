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

absl::Status Annotate(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& gguf_path) {
  auto model = std::unique_ptr<Model>(new Model());
  std::unique_ptr<ProgressBar> bar;
  auto weights = LoadGgufWeights(gguf_path, &ReportProgress, &bar);
  if (!weights.ok()) return Annotate(weights.status(), gguf_path);
  model->weights_ = *std::move(weights);
  if (bar != nullptr) bar->Done();

  auto gguf = GgufFile::Open(gguf_path);
  if (!gguf.ok()) return Annotate(gguf.status(), gguf_path);
  model->gguf_ = *std::move(gguf);
  auto tokenizer = Tokenizer::FromGguf(*model->gguf_);
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), gguf_path);
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

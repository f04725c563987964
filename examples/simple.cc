// The smallest program that uses Glimpse's runtime as a library: load a GGUF model, prefill a
// chat prompt while SnapKV scores every KV entry, keep half of each (layer, kv-head), then
// generate greedily from what was kept (llama.cpp's `simple` example, with eviction).
//
//   build/examples/glimpse_simple [MODEL.gguf] ["a question"]
//
// Without a model path it uses the default model (fetched once into the cache by `make model`).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/model/generator.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/model/sampler.h"
#include "core/model/sequence.h"
#include "core/model/text_stream.h"

namespace {

absl::Status Run(const std::string& model_path, const std::string& question) {
  // 1. The model: weights (mmap), tokenizer, chat template.
  std::string path = model_path;
  if (path.empty()) {
    absl::StatusOr<std::string> cached = glimpse::model::EnsureDefaultModel();
    if (!cached.ok()) return cached.status();
    path = *cached;
  }
  absl::StatusOr<std::unique_ptr<glimpse::model::Model>> model = glimpse::model::Model::Load(path);
  if (!model.ok()) return model.status();
  const glimpse::model::Tokenizer& tok = (*model)->tokenizer();
  const std::vector<int32_t> prompt = tok.Encode(tok.ApplyChatTemplate({{"user", question}}, true));

  // 2. Prefill with eviction: SnapKV (observation window 16, max pooling over 9 keys) scores every
  //    entry and each head keeps half of them, at least the 4 attention sinks and the last 16
  //    tokens (a short prompt is kept whole).
  glimpse::eviction::ScorerConfig snapkv;
  snapkv.method = "snapkv";
  snapkv.window = 16;
  snapkv.kernel = 9;
  snapkv.pooling = "max";
  absl::StatusOr<std::unique_ptr<glimpse::eviction::Scorer>> scorer =
      glimpse::eviction::CreateScorer(snapkv);
  if (!scorer.ok()) return scorer.status();
  glimpse::eviction::SelectionOptions keep;
  keep.sinks = 4;
  keep.window = 16;
  keep.budget_tokens =
      std::max<int64_t>((static_cast<int64_t>(prompt.size()) + 1) / 2, keep.sinks + keep.window);
  glimpse::kernels::ThreadPool pool(2);
  glimpse::model::Sequence session(**model, pool);
  absl::StatusOr<glimpse::eviction::EvictionResult> evicted =
      glimpse::eviction::PrefillAndEvict(session, prompt, **scorer, keep);
  if (!evicted.ok()) return evicted.status();
  const glimpse::model::ModelConfig& c = (*model)->config();
  std::printf("prompt %zu tokens; kept %lld of %lld KV entries\n", prompt.size(),
              static_cast<long long>(session.cache().TotalEntries()),
              static_cast<long long>(prompt.size()) * c.n_layers * c.n_kv_heads);

  // 3. Generate greedily from the kept entries, streaming the text.
  absl::StatusOr<glimpse::model::Sampler> sampler = glimpse::model::Sampler::Create({});
  if (!sampler.ok()) return sampler.status();
  glimpse::model::TextStream text(tok);
  absl::StatusOr<glimpse::model::GenerationResult> out = glimpse::model::DecodeFrom(
      session, *sampler, evicted->last_logits, /*max_tokens=*/48, [&](int32_t token) {
        absl::StatusOr<std::string> piece = text.Push(token);
        if (piece.ok()) std::fputs(piece->c_str(), stdout);
        std::fflush(stdout);
        return true;
      });
  if (!out.ok()) return out.status();
  std::printf("\n%zu tokens at %.1f tok/s\n", out->tokens.size(),
              out->tokens.size() / std::max(out->decode_seconds, 1e-9));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "";
  const std::string question =
      argc > 2 ? argv[2]
               : "The lighthouse keeper, Mara Quill, kept the log on the third shelf of the "
                 "lamp room and wound the clock every evening at six. Her brother Tobias "
                 "brought supplies by boat on Tuesdays. Who brought the supplies, and on which "
                 "day?";
  if (absl::Status st = Run(model, question); !st.ok()) {
    std::fprintf(stderr, "glimpse_simple: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

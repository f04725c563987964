// H2O heavy hitters (FMInference/H2O h2o_hf/utils_real_drop/modify_llama.py; arXiv 2306.14048):
// a key's score is the attention it accumulated from every prompt query,
//   acc_h[j] = Σ_{i >= j} softmax_j'(q_i·k_j' / √hd)[j]     (view.accumulated_attention, [H, T])
//   s[kv, j] = mean over the GQA group of acc_h[j]
// (the original runs without GQA; the group mean follows kvpress's convention for shared kv-heads).
// The recent-window half of H2O's budget is the shared selection's window.
#include <memory>

#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

class H2oScorer final : public Scorer {
 public:
  std::string_view name() const override { return "h2o"; }
  uint32_t needs() const override { return kAccumulatedAttention; }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    MeanOverGroup(scores, view.accumulated_attention, view.n_heads, view.n_kv_heads, view.n_tokens);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Scorer> NewH2oScorer() { return std::make_unique<H2oScorer>(); }

}  // namespace glimpse::eviction

// LookaheadKV as a scorer (arXiv 2603.10899): the scores are the lookahead rows' mean attention to
// each prompt key, computed by the pipeline's second pass (lookahead_pass.h). With an observation
// window W > 0 the last W prompt queries join the R rows as SnapKV's window does:
//   s[kv, j] = (R · look[kv, j] + W · win[kv, j]) / (R + W)
// where win is their mean attention (causal inside the window, mean over the GQA group) — the
// mean attention of all R + W queries, so a question the rows underweight still keeps what it
// reads. The window keys themselves are kept by selection (a scorer's window replaces the recent
// window), so their scores are irrelevant.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status_macros.h"
#include "core/eviction/lookahead_module.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

class LookaheadScorer : public Scorer {
 public:
  LookaheadScorer(std::unique_ptr<LookaheadModule> module, int64_t window)
      : module_(std::move(module)), window_(window) {}
  std::string_view name() const override { return "lookahead"; }
  uint32_t needs() const override {
    return kLookaheadAttention | (window_ > 0 ? kKeys | kWindowQueries : 0u);
  }
  int64_t window() const override { return window_; }
  const LookaheadModule* lookahead_module() const override { return module_.get(); }

  absl::Status Score(const LayerView& view, float* scores) const override {
    RETURN_IF_ERROR(ValidateView(view, needs(), name(), scores));
    const int64_t T = view.n_tokens, Hkv = view.n_kv_heads;
    std::memcpy(scores, view.lookahead_attention, Hkv * T * sizeof(float));
    if (window_ == 0) return absl::OkStatus();
    RETURN_IF_ERROR(ValidateWindow(view, window_, name()));
    const int64_t W = window_, H = view.n_heads;
    std::vector<float> probs(W * T);     // [W, T] of one head
    std::vector<float> per_head(H * T);  // [H, T] mean over the window's queries
    for (int32_t h = 0; h < H; ++h) {
      WindowAttention(view, W, h, probs.data());
      WindowMean(probs.data(), W, T, T, per_head.data() + h * T);
    }
    std::vector<float> window_mean(Hkv * T);  // [Hkv, T]
    MeanOverGroup(window_mean.data(), per_head.data(), H, Hkv, T);
    const float R = static_cast<float>(module_->n_lookahead()), w = static_cast<float>(W);
    for (int64_t e = 0; e < Hkv * T; ++e) {
      scores[e] = (R * scores[e] + w * window_mean[e]) / (R + w);
    }
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<LookaheadModule> module_;
  const int64_t window_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewLookaheadScorer(const std::string& module_path,
                                                           int64_t window) {
  if (module_path.empty()) {
    return absl::InvalidArgumentError("lookahead needs a module file (module_path / --module)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LookaheadModule> module, LookaheadModule::Open(module_path));
  return std::unique_ptr<Scorer>(new LookaheadScorer(std::move(module), window));
}

}  // namespace glimpse::eviction

// Pooling for scorers without an observation window (LookaheadKV, the learned gates, H2O, …):
// their scores [Hkv, T] pooled along the key axis, each kv-head's row on its own (Pool1d). A name
// or a number spans several tokens; a scorer that ranks one of them high keeps the others only
// when they rank high too, and pooling lets the neighbours share the score, as SnapKV pools its
// window attention. docs/eviction_quality.md measures what it buys LookaheadKV.
#include <memory>
#include <vector>

#include "core/common/status_macros.h"
#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"

namespace glimpse::eviction {
namespace {

class PooledScorer : public Scorer {
 public:
  PooledScorer(std::unique_ptr<Scorer> inner, int64_t kernel, Pooling pooling)
      : inner_(std::move(inner)), kernel_(kernel), pooling_(pooling) {}

  std::string_view name() const override { return inner_->name(); }
  uint32_t needs() const override { return inner_->needs(); }
  int64_t window() const override { return inner_->window(); }
  const LookaheadModule* lookahead_module() const override { return inner_->lookahead_module(); }
  bool has_layer_preference() const override { return inner_->has_layer_preference(); }

  absl::Status Score(const LayerView& view, float* scores) const override {
    if (scores == nullptr) return absl::InvalidArgumentError("pooled scorer: no output");
    std::vector<float> raw(RawSize(view));
    RETURN_IF_ERROR(inner_->Score(view, raw.data()));
    Pool(view, raw, scores);
    return absl::OkStatus();
  }

  absl::Status ScoreWithPreference(const LayerView& view, float* scores,
                                   double* preference) const override {
    if (scores == nullptr) return absl::InvalidArgumentError("pooled scorer: no output");
    std::vector<float> raw(RawSize(view));
    RETURN_IF_ERROR(inner_->ScoreWithPreference(view, raw.data(), preference));
    Pool(view, raw, scores);
    return absl::OkStatus();
  }

 private:
  static size_t RawSize(const LayerView& view) {
    return static_cast<size_t>(view.n_kv_heads) * static_cast<size_t>(view.n_tokens);
  }

  void Pool(const LayerView& view, const std::vector<float>& raw, float* scores) const {
    for (int32_t kv = 0; kv < view.n_kv_heads; ++kv) {
      const int64_t row = int64_t{kv} * view.n_tokens;
      Pool1d(scores + row, raw.data() + row, view.n_tokens, kernel_, pooling_);
    }
  }

  const std::unique_ptr<Scorer> inner_;
  const int64_t kernel_;
  const Pooling pooling_;
};

}  // namespace

std::unique_ptr<Scorer> NewPooledScorer(std::unique_ptr<Scorer> inner, int64_t kernel,
                                        Pooling pooling) {
  return std::make_unique<PooledScorer>(std::move(inner), kernel, pooling);
}

}  // namespace glimpse::eviction

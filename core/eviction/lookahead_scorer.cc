// LookaheadKV as a scorer (arXiv 2603.10899): the scores are the lookahead rows' mean attention to
// each prompt key, computed by the pipeline's second pass (lookahead_pass.h); Score() only hands
// them through, so the scorer holds nothing but its module.
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/lookahead_module.h"
#include "core/eviction/scorer.h"

namespace glimpse::eviction {
namespace {

class LookaheadScorer : public Scorer {
 public:
  explicit LookaheadScorer(std::unique_ptr<LookaheadModule> module) : module_(std::move(module)) {}
  std::string_view name() const override { return "lookahead"; }
  uint32_t needs() const override { return kLookaheadAttention; }
  const LookaheadModule* lookahead_module() const override { return module_.get(); }

  absl::Status Score(const LayerView& view, float* scores) const override {
    if (view.lookahead_attention == nullptr) {
      return absl::InvalidArgumentError("lookahead: the view lacks lookahead_attention");
    }
    std::memcpy(scores, view.lookahead_attention,
                int64_t{view.n_kv_heads} * view.n_tokens * sizeof(float));
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<LookaheadModule> module_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> NewLookaheadScorer(const std::string& module_path) {
  if (module_path.empty()) {
    return absl::InvalidArgumentError("lookahead needs a module file (module_path / --module)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LookaheadModule> module, LookaheadModule::Open(module_path));
  return std::unique_ptr<Scorer>(new LookaheadScorer(std::move(module)));
}

}  // namespace glimpse::eviction

// LookaheadKV's second pass (arXiv 2603.10899; kvpress restorekv_press.py is a close relative):
// after a prompt of T tokens has been prefilled, the module's n lookahead embeddings run through
// the model at positions T … T+n−1 with the module's LoRA on every projection of those rows only
// (prompt rows were computed without it, exactly as in one joint forward over prompt + lookahead
// where the adapter is active on the lookahead rows alone). Each lookahead row attends to every
// prompt entry and to the lookahead rows causally before it. The score of prompt key j in
// (layer, kv-head h) is
//
//   s[h, j] = 1 / (n · G) · Σ_{i lookahead row} Σ_{g in h's GQA group} softmax_j(q_{i,g} · k_j /
//   √hd)
//
// where the softmax runs over all keys the row sees (prompt and lookahead): the probabilities are
// the model's own attention weights, read at the prompt keys and NOT renormalised over them (the
// paper's "mean attention of the lookahead queries to prompt key j"; the mass a row puts on
// lookahead keys is simply not counted). The pass leaves nothing in the cache.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/lookahead_module.h"
#include "core/model/sequence.h"

namespace glimpse::eviction {

// Accumulates s[layer][h, j] over the rows of a forward call whose positions are >= n_prompt
// (the lookahead rows; earlier rows of the same call are ignored, so a joint pass over prompt +
// lookahead gives the same scores). Prompt entries are those with position < n_prompt; each such
// position must appear at most once per head. `n_rows` is the number of lookahead rows the call
// will run (the 1 / n of the mean).
class LookaheadAttentionObserver : public model::LayerObserver {
 public:
  LookaheadAttentionObserver(const model::Sequence& session, int64_t n_prompt, int64_t n_rows);
  void OnLayer(int32_t layer, const model::LayerActivations& activations) override;
  // [layer][Hkv · n_prompt]; a prompt position missing from a head's cache scores 0.
  std::vector<std::vector<float>>& scores() { return scores_; }

 private:
  const model::Sequence& session_;
  const int64_t n_prompt_;
  const int64_t n_rows_;
  std::vector<std::vector<float>> scores_;
};

// Runs `module` after the session's prompt and returns s[layer] as [Hkv, T], T =
// session.next_position(). The session's cache and position are unchanged afterwards, also on
// error. FailedPrecondition when the session is empty or a head does not hold exactly its T
// prompt entries (run it after the prefill, before eviction), or the module was made for another
// model; InvalidArgument for module shapes that do not fit the model, or T + n beyond the context.
absl::StatusOr<std::vector<std::vector<float>>> RunLookaheadPass(model::Sequence& session,
                                                                 const LookaheadModule& module);

}  // namespace glimpse::eviction

// A session's eviction policy as prefill and decode workers run it (proto EvictionPolicy): which
// scorer, what share of the tokens to keep, and the codec of its pages; and the scorers a worker
// has built, one per method, made on first use.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/eviction/scorer.h"
#include "core/kvpage/codec.h"

namespace glimpse::worker {

struct Policy {
  std::string method;  // a scorer name; "" keeps everything
  double budget_ratio = 1.0;
  kvpage::Codec codec = kvpage::Codec::kFp16;
};

// Checks and converts the wire form: method known (or "" / "none"), ratio in (0, 1] when a method
// is set, codec known. InvalidArgument naming the field otherwise.
absl::StatusOr<Policy> ParsePolicy(std::string_view method, double budget_ratio,
                                   std::string_view codec);

// Scorers are built once per method (a LookaheadKV module loads its weights) and shared by turns.
// Thread-safe; a scorer itself is used by one turn at a time (workers serialise their turns).
class ScorerCache {
 public:
  explicit ScorerCache(std::string lookahead_module)
      : lookahead_module_(std::move(lookahead_module)) {}

  // The scorer for `policy.method` (not empty). FailedPrecondition for "lookahead" without a
  // module.
  absl::StatusOr<const eviction::Scorer*> For(const Policy& policy);

 private:
  const std::string lookahead_module_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<eviction::Scorer>> scorers_;  // GUARDED_BY(mu_)
};

}  // namespace glimpse::worker

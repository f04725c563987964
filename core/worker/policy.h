// A session's eviction policy as prefill and decode workers run it (proto EvictionPolicy): which
// method, what share of the tokens to keep, and the codec of its pages; and the methods a worker
// has built, one per method name, made on first use with the settings of the worker's eviction
// profile (core/eviction/profile.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/eviction/decode_eviction.h"
#include "core/eviction/profile.h"
#include "core/eviction/scorer.h"
#include "core/kvpage/codec.h"
#include "core/model/sequence.h"

namespace glimpse::worker {

struct Policy {
  std::string method;  // a policy method (eviction::PolicyMethods()); "" keeps everything
  double budget_ratio = 1.0;
  kvpage::Codec codec = kvpage::Codec::kFp16;
  // Decode-time eviction by `method` (core/eviction/decode_eviction.h): entries per head kept
  // while generating (0: none), cut back every decode_interval generated tokens.
  int64_t decode_budget_tokens = 0;
  int64_t decode_interval = eviction::kDefaultDecodeInterval;
};

// The most entries per head a decode-time budget may name (a larger one never evicts).
inline constexpr int64_t kMaxDecodeBudgetTokens = 1 << 20;

// Checks and converts the wire form: method known (or "" / "none"), ratio in (0, 1] when a method
// is set, codec known. InvalidArgument naming the field otherwise.
absl::StatusOr<Policy> ParsePolicy(std::string_view method, double budget_ratio,
                                   std::string_view codec);

// Sets the policy's decode-time eviction from the wire form: budget 0 (none) or in
// [1, kMaxDecodeBudgetTokens] with a method set; interval 0 (eviction::kDefaultDecodeInterval) or
// in [1, 4096].
// InvalidArgument naming the field otherwise; the policy is unchanged then.
absl::Status SetDecodeEviction(Policy& policy, int64_t budget_tokens, int64_t interval);

// The format a worker holds a session's KV in, in its KV pool, for the policy's page codec: the
// codec's own (fp32, fp16, bf16, int8, fp8_e4m3, kivi4, kivi2; KIVI pages fill in fp16 first,
// model/kv_cache.h).
kernels::KvDType HotFormat(kvpage::Codec codec);

// The format an idle hot session held in `dtype` may be re-encoded into when its worker needs
// memory: kivi4 for int8 and fp8_e4m3 (its policy already quantises its KV; KIVI's 4-bit groups
// hold it in about half the bytes once pages are full), none for fp32, fp16, bf16 (a policy that
// asked for near-exact KV) and KIVI.
std::optional<kernels::KvDType> IdleShrinkFormat(kernels::KvDType dtype);

// A new session's options on a worker: pages from `pool` (nullptr: a private fp32 pool) in the
// hot format of `codec`, prompts run `prefill_chunk` tokens at a time.
model::SequenceOptions SessionOptionsFor(
    model::KvPool* pool, kvpage::Codec codec,
    int32_t prefill_chunk = model::SequenceOptions{}.prefill_chunk);

// A policy's method as a worker runs it: its scorer and the settings it was built from. A null
// scorer keeps everything.
struct Method {
  const eviction::Scorer* scorer = nullptr;            // owned by the ScorerCache
  const eviction::MethodSettings* settings = nullptr;  // likewise; set exactly when scorer is
};

// Methods are built once per name (a LookaheadKV module loads its weights) and shared by turns.
// Thread-safe; a scorer itself is used by one turn at a time (workers serialise their turns).
class ScorerCache {
 public:
  ScorerCache(std::string lookahead_module, eviction::EvictionProfile profile)
      : lookahead_module_(std::move(lookahead_module)), profile_(std::move(profile)) {}

  // The method `policy.method` names (not empty), with the profile's settings.
  // FailedPrecondition for "lookahead" without a module, or a learned gate without its trained
  // weights beside the module (eviction::AttachLearnedFiles).
  absl::StatusOr<Method> For(const Policy& policy);

 private:
  struct Built {
    eviction::MethodSettings settings;
    std::unique_ptr<eviction::Scorer> scorer;
  };
  const std::string lookahead_module_;
  const eviction::EvictionProfile profile_;
  absl::Mutex mu_;
  std::map<std::string, Built> methods_ ABSL_GUARDED_BY(mu_);  // entries never move
};

}  // namespace glimpse::worker

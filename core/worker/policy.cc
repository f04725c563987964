#include "core/worker/policy.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/common/status_macros.h"

namespace glimpse::worker {

absl::StatusOr<Policy> ParsePolicy(std::string_view method, double budget_ratio,
                                   std::string_view codec) {
  Policy p;
  if (!method.empty() && method != "none") {
    const std::vector<std::string> known = eviction::PolicyMethods();
    if (std::find(known.begin(), known.end(), method) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("policy.method \"", std::string(method),
                                                     "\" is not an eviction method; known: none, ",
                                                     absl::StrJoin(known, ", ")));
    }
    if (!(budget_ratio > 0.0 && budget_ratio <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.budget_ratio must be in (0, 1], got ", budget_ratio));
    }
    p.method = std::string(method);
    p.budget_ratio = budget_ratio;
  }
  if (!codec.empty()) {
    const kvpage::CodecInfo* info = kvpage::FindCodecByName(codec);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.codec \"", std::string(codec),
                       "\" is not a codec (fp16, bf16, fp8_e4m3, int8, kivi4, kivi2, fp32)"));
    }
    p.codec = info->id;
  }
  return p;
}

absl::Status SetDecodeEviction(Policy& policy, int64_t budget_tokens, int64_t interval) {
  constexpr int64_t kMaxInterval = 4096;
  if (budget_tokens < 0 || budget_tokens > kMaxDecodeBudgetTokens) {
    return absl::InvalidArgumentError(absl::StrCat("policy.decode_budget_tokens must be in [0, ",
                                                   kMaxDecodeBudgetTokens, "], got ",
                                                   budget_tokens));
  }
  if (interval < 0 || interval > kMaxInterval) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.decode_interval must be in [0, ", kMaxInterval, "], got ", interval));
  }
  if (budget_tokens > 0 && policy.method.empty()) {
    return absl::InvalidArgumentError(
        "policy.decode_budget_tokens needs an eviction method (policy.method) to choose what "
        "goes");
  }
  policy.decode_budget_tokens = budget_tokens;
  if (interval > 0) policy.decode_interval = interval;
  return absl::OkStatus();
}

kernels::KvDType HotFormat(kvpage::Codec codec) {
  switch (codec) {
    case kvpage::Codec::kFp32:
      return kernels::KvDType::kF32;
    case kvpage::Codec::kBf16:
      return kernels::KvDType::kBF16;
    case kvpage::Codec::kInt8:
      return kernels::KvDType::kI8;
    case kvpage::Codec::kFp8E4M3:
      return kernels::KvDType::kE4M3;
    case kvpage::Codec::kFp16:
      return kernels::KvDType::kF16;
    case kvpage::Codec::kKivi4:
      return kernels::KvDType::kKivi4;
    case kvpage::Codec::kKivi2:
      return kernels::KvDType::kKivi2;
  }
  return kernels::KvDType::kF16;
}

std::optional<kernels::KvDType> IdleShrinkFormat(kernels::KvDType dtype) {
  if (dtype == kernels::KvDType::kI8 || dtype == kernels::KvDType::kE4M3) {
    return kernels::KvDType::kKivi4;
  }
  return std::nullopt;
}

model::SequenceOptions SessionOptionsFor(model::KvPool* pool, kvpage::Codec codec,
                                         int32_t prefill_chunk) {
  return {.prefill_chunk = prefill_chunk, .kv_pool = pool, .kv_dtype = HotFormat(codec)};
}

absl::StatusOr<Method> ScorerCache::For(const Policy& policy) {
  absl::MutexLock lock(&mu_);
  auto it = methods_.find(policy.method);
  if (it == methods_.end()) {
    ASSIGN_OR_RETURN(eviction::MethodSettings settings, profile_.For(policy.method));
    eviction::ScorerConfig config = settings.scorer;
    RETURN_IF_ERROR(eviction::AttachLearnedFiles(config, lookahead_module_));
    ASSIGN_OR_RETURN(std::unique_ptr<eviction::Scorer> scorer, eviction::CreateScorer(config));
    it = methods_.emplace(policy.method, Built{std::move(settings), std::move(scorer)}).first;
  }
  return Method{.scorer = it->second.scorer.get(), .settings = &it->second.settings};
}

}  // namespace glimpse::worker

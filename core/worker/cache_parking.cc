#include "core/worker/cache_parking.h"

#include <random>

#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/kvstate/cache_pages.h"
#include "core/worker/turn_steps.h"

namespace glimpse::worker {
namespace {

kvstate::NamespaceKey RandomNamespace() {
  std::random_device rd;
  kvstate::NamespaceKey ns;
  for (uint8_t& b : ns) b = static_cast<uint8_t>(rd());
  return ns;
}

}  // namespace

CacheParking::CacheParking(cache_client::CacheClient& cache, const model::Model& model,
                           model::Sequence& session, std::span<const int32_t> prompt,
                           std::string session_id, int64_t page_tokens)
    : cache_(cache),
      model_(model),
      session_(session),
      prompt_(prompt.begin(), prompt.end()),
      session_id_(std::move(session_id)),
      page_tokens_(page_tokens),
      namespace_key_(RandomNamespace()) {}

CacheParking::~CacheParking() {
  if (!stored_) return;
  if (absl::Status st = cache_.Delete(namespace_key_, *stored_); !st.ok()) {
    log::Warning("deleting a parked state failed; the cache node's retention will drop it",
                 {{"session", session_id_}, {"error", st.ToString()}});
  }
}

Parking CacheParking::Hooks() {
  return {.park = [this](std::span<const int32_t> generated) { return Park(generated); },
          .unpark = [this] { return Unpark(); }};
}

absl::Status CacheParking::Park(std::span<const int32_t> generated) {
  std::vector<int32_t> tokens = prompt_;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  if (static_cast<int32_t>(tokens.size()) != session_.next_position()) {
    return absl::InternalError("the tokens to park do not match the session's position");
  }
  const model::KvCache& cache = session_.cache();
  ASSIGN_OR_RETURN(kvstate::EncodedState state,
                   EncodeSessionState(model_, cache, TierScores{}, namespace_key_, tokens,
                                      model::RowCodec(cache.dtype()), page_tokens_));
  RETURN_IF_ERROR(StoreState(cache_, state, tokens, session_id_));
  stored_ = state.manifest.state_key;
  position_ = session_.next_position();
  session_.Reset();
  log::Info("parked a running sequence on the cache node",
            {{"session", session_id_},
             {"tokens", static_cast<long long>(tokens.size())},
             {"bytes", static_cast<long long>(state.bytes.size())}});
  return absl::OkStatus();
}

absl::Status CacheParking::Unpark() {
  if (!stored_) return absl::FailedPreconditionError("nothing is parked");
  ASSIGN_OR_RETURN(cache_client::State state,
                   cache_.Get(namespace_key_, *stored_, FingerprintOf(model_)));
  absl::Status loaded = kvstate::LoadPages(state.manifest, state.pages,
                                           kvstate::LoadTiers::kRetained, &session_.cache());
  if (loaded.ok()) loaded = session_.Resume(position_);
  if (!loaded.ok()) {
    session_.Reset();  // all or nothing: a partial load would be a different sequence
    return loaded;
  }
  if (absl::Status st = cache_.Delete(namespace_key_, *stored_); !st.ok()) {
    log::Warning("deleting a parked state failed; the cache node's retention will drop it",
                 {{"session", session_id_}, {"error", st.ToString()}});
  }
  stored_.reset();
  return absl::OkStatus();
}

}  // namespace glimpse::worker

#include "core/worker/prefill_delivery.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::worker {

std::vector<std::span<const uint8_t>> OutgoingDelivery::buffers() const {
  std::vector<std::span<const uint8_t>> out = {
      std::span<const uint8_t>(header),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size()),
      std::span<const uint8_t>(pages)};
  if (!delta.empty()) out.push_back(std::span<const uint8_t>(delta));
  return out;
}

OutgoingDelivery MakeDelivery(uint64_t id, const kvstate::EncodedState& state,
                              std::vector<uint8_t> delta) {
  kvstate::Manifest retained = state.manifest;
  retained.pages.clear();
  OutgoingDelivery out;
  out.delta = std::move(delta);
  const std::vector<std::span<const uint8_t>> pages = state.pages();
  for (size_t i = 0; i < pages.size(); ++i) {
    if (state.manifest.pages[i].tier != kvstate::Tier::kRetained) continue;
    retained.pages.push_back(state.manifest.pages[i]);
    out.pages.insert(out.pages.end(), pages[i].begin(), pages[i].end());
  }
  out.header = kvstate::EncodeBatchHeader({kvstate::BatchKind::kPrefillDelivery, id,
                                           static_cast<uint32_t>(retained.pages.size()),
                                           kvstate::BatchHeader::kPacked});
  out.manifest = kvstate::EncodeManifest(retained);
  return out;
}

absl::StatusOr<Delivery> ParseDelivery(transport::ReceivedBatch batch) {
  const std::vector<std::span<const uint8_t>>& bufs = batch.buffers();
  if (bufs.size() != 3 && bufs.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a delivery has 3 buffers (header, manifest, pages) and a delta base, got ", bufs.size()));
  }
  ASSIGN_OR_RETURN(kvstate::BatchHeader h, kvstate::DecodeBatchHeader(bufs[0]));
  if (h.kind != kvstate::BatchKind::kPrefillDelivery) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch kind ", static_cast<int>(h.kind), " is not a prefill delivery"));
  }
  Delivery d;
  d.id = h.id;
  ASSIGN_OR_RETURN(d.manifest, kvstate::DecodeManifest(std::string_view(
                                   reinterpret_cast<const char*>(bufs[1].data()), bufs[1].size())));
  if (d.manifest.pages.size() != h.page_count) {
    return absl::InvalidArgumentError(absl::StrCat("delivery ", h.id, ": the header counts ",
                                                   h.page_count, " pages, the manifest lists ",
                                                   d.manifest.pages.size()));
  }
  std::vector<uint32_t> sizes;
  for (const kvstate::PageRef& p : d.manifest.pages) sizes.push_back(p.bytes);
  ASSIGN_OR_RETURN(d.pages, kvstate::UnpackPages(h, std::span(bufs).subspan(2, 1), sizes));
  if (bufs.size() == 4) {
    ASSIGN_OR_RETURN(d.delta, DecodeDeltaBase(bufs[3]));
  }
  d.bytes = batch.total_bytes();
  d.batch = std::make_shared<const transport::ReceivedBatch>(std::move(batch));
  return d;
}

DeliveryInbox::DeliveryInbox(std::unique_ptr<transport::Transport> transport,
                             DeliveryInboxOptions options)
    : transport_(std::move(transport)), options_(options), receiver_([this] { Loop(); }) {}

DeliveryInbox::~DeliveryInbox() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  receiver_.join();
}

void DeliveryInbox::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::StatusOr<transport::ReceivedBatch> got =
        transport_->Receive(absl::Now() + absl::Milliseconds(100));
    if (!got.ok() && absl::IsDeadlineExceeded(got.status())) continue;
    absl::StatusOr<Delivery> d = got.ok() ? ParseDelivery(*std::move(got)) : got.status();
    if (!d.ok()) {
      log::Warning("delivery inbox: dropped a batch", {{"error", d.status().ToString()}});
      absl::MutexLock lock(&mu_);
      ++stats_.rejected;
      continue;
    }
    Keep(*std::move(d));
  }
}

void DeliveryInbox::Keep(Delivery d) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  ++stats_.received;
  const uint64_t id = d.id;
  if (auto old = held_.find(id); old != held_.end()) {  // a resent id replaces the earlier one
    stats_.held_bytes -= old->second.delivery.bytes;
    held_.erase(old);
    ++stats_.dropped;
  }
  stats_.held_bytes += d.bytes;
  held_.emplace(id, Held{std::move(d), now});
  order_.push_back(id);
  DropOldLocked(now);
  arrived_.SignalAll();
}

void DeliveryInbox::DropOldLocked(absl::Time now) {
  while (!order_.empty()) {
    auto it = held_.find(order_.front());
    if (it == held_.end()) {  // taken already
      order_.pop_front();
      continue;
    }
    const bool expired = now - it->second.arrived > options_.keep_for;
    const bool over = stats_.held_bytes > options_.max_bytes && held_.size() > 1;
    if (!expired && !over) return;
    log::Warning("delivery inbox: dropped a delivery no turn took",
                 {{"delivery", absl::StrCat(it->first)}, {"expired", expired ? "yes" : "no"}});
    stats_.held_bytes -= it->second.delivery.bytes;
    held_.erase(it);
    order_.pop_front();
    ++stats_.dropped;
  }
}

absl::StatusOr<Delivery> DeliveryInbox::Take(uint64_t id, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    DropOldLocked(absl::Now());
    auto it = held_.find(id);
    if (it != held_.end()) {
      Delivery d = std::move(it->second.delivery);
      stats_.held_bytes -= d.bytes;
      held_.erase(it);
      return d;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("prefill delivery ", id, " did not arrive in time"));
    }
    arrived_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  }
}

DeliveryInboxStats DeliveryInbox::Stats() const {
  absl::MutexLock lock(&mu_);
  DeliveryInboxStats s = stats_;
  s.held = held_.size();
  s.peers_refused = transport_->GetMetrics().peers_refused;
  return s;
}

}  // namespace glimpse::worker

// How a prefill worker hands a prefilled state to a decode worker (DESIGN.md §1): one transport
// batch, shipped straight to the decode worker's transport address.
//
//   buffer 0  kvstate::BatchHeader{kind kPrefillDelivery, id = delivery id, page_count, packed}
//   buffer 1  the manifest (kvstate::EncodeManifest) listing the retained pages alone
//   buffer 2  those pages back to back, in manifest order
//   buffer 3  only in a delta (prefill_delta.h): the DeltaBase; the pages are then the added
//             entries alone
//
// The delivery id is chosen by the caller of the prefill (the frontend: 64 random bits) and named
// again in the decode request. The decode worker checks the manifest's state key against the
// conversation it was asked to continue and every page against the manifest (CRC, model, shape),
// so a delivery can only seed the state it summarises.
//
// DeliveryInbox is the decode worker's side: one thread receives deliveries on the inbox's own
// transport and keeps each until a turn takes it, at most `keep_for` and `max_bytes` in all (the
// oldest go first). A batch that is not a well-formed delivery is logged and dropped. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/kvstate/cache_pages.h"
#include "core/kvstate/transfer_header.h"
#include "core/transport/transport.h"
#include "core/worker/prefill_delta.h"

namespace glimpse::worker {

// A delivery ready to submit; buffers() views its own storage.
struct OutgoingDelivery {
  std::array<uint8_t, kvstate::kBatchHeaderBytes> header{};
  std::string manifest;
  std::vector<uint8_t> pages;
  std::vector<uint8_t> delta;  // EncodeDeltaBase, or empty for a whole state

  std::vector<std::span<const uint8_t>> buffers() const;
  uint64_t bytes() const { return header.size() + manifest.size() + pages.size() + delta.size(); }
};

// The retained pages of `state` (which lists both tiers) as delivery `id`; with `delta` (an
// encoded DeltaBase) the pages are the entries added to that base.
OutgoingDelivery MakeDelivery(uint64_t id, const kvstate::EncodedState& state,
                              std::vector<uint8_t> delta = {});

struct Delivery {
  uint64_t id = 0;
  kvstate::Manifest manifest;                   // the retained pages, as shipped
  std::vector<std::span<const uint8_t>> pages;  // pages[i] is manifest.pages[i]; owned by batch
  std::shared_ptr<const transport::ReceivedBatch> batch;
  uint64_t bytes = 0;
  std::optional<DeltaBase> delta;  // set: the pages are added to the decode worker's hot copy
};

// InvalidArgument / DataLoss naming what is wrong when `batch` is not a well-formed delivery
// (pages are checked later, against the manifest, when they are loaded).
absl::StatusOr<Delivery> ParseDelivery(transport::ReceivedBatch batch);

struct DeliveryInboxOptions {
  absl::Duration keep_for = absl::Seconds(60);  // a delivery no turn took by then is dropped
  uint64_t max_bytes = uint64_t{1} << 30;       // held deliveries; the oldest go first
};

struct DeliveryInboxStats {
  uint64_t received = 0;       // well-formed deliveries
  uint64_t rejected = 0;       // batches that were not (from unregistered peers included)
  uint64_t peers_refused = 0;  // batches from peers the transport's allowlist refused
  uint64_t dropped = 0;        // expired or pushed out before a turn took them
  uint64_t held = 0;
  uint64_t held_bytes = 0;
};

class DeliveryInbox {
 public:
  DeliveryInbox(std::unique_ptr<transport::Transport> transport, DeliveryInboxOptions options = {});
  ~DeliveryInbox();

  std::string address() const { return transport_->LocalAddress(); }
  // Delivery `id`, removed from the inbox; waits until `deadline` for it to arrive
  // (DeadlineExceeded naming the id otherwise).
  absl::StatusOr<Delivery> Take(uint64_t id, absl::Time deadline);
  DeliveryInboxStats Stats() const;

 private:
  struct Held {
    Delivery delivery;
    absl::Time arrived;
  };
  void Loop();
  void Keep(Delivery d);
  void DropOldLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<transport::Transport> transport_;
  const DeliveryInboxOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar arrived_;
  std::map<uint64_t, Held> held_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);  // arrival order (ids may be taken already)
  DeliveryInboxStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread receiver_;
};

}  // namespace glimpse::worker

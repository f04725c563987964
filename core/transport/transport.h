// Transport: ships batches of byte buffers (KV pages) between engines, one logical transfer per
// batch with one completion, in the shape of Mooncake's transfer engine (abstract transport,
// one folder per backend, batch API submit -> status).
//
// Contract (every backend):
//   - LocalAddress() is an opaque byte string that a coordinator hands to peers; Connect(address)
//     turns it into a PeerId. A malformed address is InvalidArgument, an unreachable one an
//     error from Connect or from the first transfer (Unavailable / DeadlineExceeded), never a hang.
//   - Submit(peer, buffers) ships the buffers as one batch and returns a TransferId at once. The
//     caller keeps the buffers alive and unchanged until Wait() returns a final status (or
//     GetStatus() says done). The batch carries a CRC32C of all its bytes; the receiver verifies it
//     and yields DataLoss on a mismatch, never the wrong bytes. A sender whose bytes carry their
//     own checksums, which the receiver verifies, may leave it out (SubmitOptions::checksum).
//   - In-flight bytes are bounded by Options::max_inflight_bytes: Submit blocks (until space or the
//     submit deadline) or returns ResourceExhausted, per SubmitOptions::block.
//   - Every transfer has a deadline (SubmitOptions::deadline, default now + default timeout).
//     Past it, or after Cancel(), the transfer's status is fixed to DeadlineExceeded / Cancelled
//     at once; it is reported done (Wait returns) when the backend no longer touches the buffers,
//     which are then free to reuse. Backends bound that delay (UCX: see ucx_transport.h).
//   - A peer that dies mid-transfer ends the transfer with an error on both sides within the
//     deadlines: Unavailable when the backend notices the failure, DeadlineExceeded otherwise.
//   - Receive(deadline) yields whole, verified batches in arrival order, or an error for a batch
//     that failed (peer died, stalled past Options::receive_stall_timeout, checksum mismatch).
//   - All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace glimpse::transport {

using PeerId = uint64_t;
using TransferId = uint64_t;

// Largest number of buffers in one batch (the tag layout reserves 12 bits for the index).
inline constexpr size_t kMaxBuffersPerBatch = 4096;

// What every backend honours; a backend's own knobs live with it (ucx/ucx_transport.h: UcxOptions).
struct Options {
  // Bound on bytes submitted but not yet completed (sum over all transfers of this engine).
  size_t max_inflight_bytes = size_t{1} << 30;
  // Deadline applied to a transfer whose SubmitOptions::deadline is InfiniteFuture.
  absl::Duration default_transfer_timeout = absl::Seconds(30);
  // A batch being received that sees no progress for this long fails with DeadlineExceeded.
  absl::Duration receive_stall_timeout = absl::Seconds(10);
  // Received buffers are recycled through a pool of at most this many bytes.
  size_t receive_pool_bytes = size_t{512} << 20;
  // Receive budget: bytes of batches whose header arrived and that Receive() has not handed out
  // yet, all senders together (max_receive_bytes) and per sender (max_receive_bytes_per_sender;
  // the default equals a sender's default in-flight bound, but a sender whose batches wait here
  // for a slow Receive() caller can reach it with less in flight). A batch beyond either is
  // refused when its header arrives, before anything is allocated for it: its bytes are received
  // into a small scratch buffer and dropped, and Receive() reports ResourceExhausted naming the
  // sender and the batch's sequence number (its transfer may still end OK on the sender's side,
  // or at its deadline). Counted in Metrics::receive_refused. A header longer than any valid one
  // is refused too; its data, if the peer sends any, is not drained (UCX keeps it unmatched).
  size_t max_receive_bytes = size_t{2} << 30;
  size_t max_receive_bytes_per_sender = size_t{1} << 30;
};

struct SubmitOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // true: Submit waits (until `deadline`) for in-flight space; false: ResourceExhausted at once.
  bool block = true;
  // false: no batch CRC32C, on either side. Only for bytes that carry their own checksums and
  // whose receiver verifies them, e.g. kvpage pages (each with its CRC32C), a manifest (with its
  // CRC32C) and a transfer header (every field checked): every service batch. The batch CRC then
  // only hashes every byte a second time on each side. Receive() says which batches it verified
  // (ReceivedBatch::checksummed).
  bool checksum = true;
};

struct TransferStatus {
  bool done = false;
  absl::Status status;  // OK while pending; the final status once done
  uint64_t bytes = 0;   // payload bytes of the batch
};

// Counters since creation. Snapshots; read with Transport::GetMetrics().
struct Metrics {
  uint64_t bytes_sent = 0;      // payload bytes of completed buffers, sender side
  uint64_t bytes_received = 0;  // payload bytes of completed buffers, receiver side
  uint64_t transfers_submitted = 0;
  uint64_t transfers_completed = 0;  // ended OK
  uint64_t transfers_failed = 0;     // ended with an error (incl. deadline, cancel)
  uint64_t batches_received = 0;     // delivered OK by Receive
  uint64_t receive_errors = 0;       // failed batches (peer, stall, checksum)
  uint64_t checksum_errors = 0;
  uint64_t inflight_bytes = 0;       // now
  uint64_t peak_inflight_bytes = 0;  // maximum ever observed
  uint64_t submits_rejected = 0;     // ResourceExhausted by back-pressure
  uint64_t peers_refused = 0;        // Connects and batches refused by a PeerAllowlist
  uint64_t local_peers = 0;          // endpoints opened over shared memory (local_shared_memory)
  uint64_t receive_buffers_deferred = 0;  // receives held back by local_receive_window_bytes
  uint64_t receive_pending_batches = 0;   // now: announced, neither delivered nor failed yet
  uint64_t receive_refused = 0;        // refused at the header: over the receive budget, oversized
                                       // headers, senders the screen refuses (ScreenSenders)
  uint64_t receive_pending_bytes = 0;  // now: the receive budget in use
};

// One received batch. Owns its buffers (returned to the engine's pool on destruction).
class ReceivedBatch {
 public:
  class Storage {  // backend-owned memory behind the spans
   public:
    virtual ~Storage() = default;
  };
  ReceivedBatch() = default;
  ReceivedBatch(std::string sender_address, std::vector<std::span<const uint8_t>> buffers,
                std::unique_ptr<Storage> storage, bool checksummed)
      : sender_address_(std::move(sender_address)),
        buffers_(std::move(buffers)),
        storage_(std::move(storage)),
        checksummed_(checksummed) {}

  // The sending engine's LocalAddress(), as the sender states it in the batch.
  const std::string& sender_address() const { return sender_address_; }
  // Whether the transport verified a batch CRC32C (false: SubmitOptions::checksum was off).
  bool checksummed() const { return checksummed_; }
  const std::vector<std::span<const uint8_t>>& buffers() const { return buffers_; }
  size_t total_bytes() const;

 private:
  std::string sender_address_;
  std::vector<std::span<const uint8_t>> buffers_;
  std::unique_ptr<Storage> storage_;
  bool checksummed_ = false;
};

// Memory registered with the backend (pinned / mapped for zero-copy). Unregistered on destruction;
// must outlive every transfer that uses it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

// Whether a transport takes a batch from `sender_address` (the address the batch states; see
// peer_allowlist.h). Asked when the batch's header arrives, on the transport's own thread, before
// anything is allocated for the batch: it must answer at once (no I/O, no waiting).
using SenderScreen = std::function<bool(std::string_view sender_address)>;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string LocalAddress() const = 0;
  virtual absl::StatusOr<PeerId> Connect(std::string_view peer_address) = 0;
  // Drops the endpoint; its pending transfers fail with Cancelled.
  virtual absl::Status Disconnect(PeerId peer) = 0;

  // Registers [data, data + size) so that buffers inside it ship zero-copy without a
  // per-transfer registration. Optional for callers: unregistered buffers work too.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const void* data,
                                                                       size_t size) = 0;

  virtual absl::StatusOr<TransferId> Submit(PeerId peer,
                                            std::span<const std::span<const uint8_t>> buffers,
                                            const SubmitOptions& options = {}) = 0;
  // NotFound for an unknown (or already waited-for) id.
  virtual absl::StatusOr<TransferStatus> GetStatus(TransferId id) = 0;
  // The final status of the transfer, which is then forgotten; DeadlineExceeded if `deadline`
  // passes first (the transfer stays pending and may be waited for again).
  virtual absl::Status Wait(TransferId id, absl::Time deadline) = 0;
  // Ends the transfer with Cancelled (no-op if already done); Wait then returns Cancelled once the
  // buffers are released. NOTE: a backend may retire the peer's endpoint to end a send already
  // handed to the network; later Submits to that peer then fail (see the backend's header).
  virtual absl::Status Cancel(TransferId id) = 0;

  // Next whole batch (or batch error) from any peer; DeadlineExceeded if none by `deadline`.
  virtual absl::StatusOr<ReceivedBatch> Receive(absl::Time deadline) = 0;

  // From now on, a batch whose sender `screen` refuses is not taken: nothing is allocated for it,
  // its bytes are dropped as they arrive, and Receive reports PermissionDenied naming the sender
  // (counted in Metrics::peers_refused). Replaces the previous screen; an empty one takes every
  // batch (the default).
  virtual void ScreenSenders(SenderScreen screen) = 0;

  virtual Metrics GetMetrics() const = 0;
};

// Forwards every call to the transport it wraps: the base of decorators (a peer allowlist, test
// doubles), which override only what they change.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  std::string LocalAddress() const override { return inner_->LocalAddress(); }
  absl::StatusOr<PeerId> Connect(std::string_view peer_address) override {
    return inner_->Connect(peer_address);
  }
  absl::Status Disconnect(PeerId peer) override { return inner_->Disconnect(peer); }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const void* data,
                                                               size_t size) override {
    return inner_->RegisterMemory(data, size);
  }
  absl::StatusOr<TransferId> Submit(PeerId peer, std::span<const std::span<const uint8_t>> buffers,
                                    const SubmitOptions& options) override {
    return inner_->Submit(peer, buffers, options);
  }
  absl::StatusOr<TransferStatus> GetStatus(TransferId id) override { return inner_->GetStatus(id); }
  absl::Status Wait(TransferId id, absl::Time deadline) override {
    return inner_->Wait(id, deadline);
  }
  absl::Status Cancel(TransferId id) override { return inner_->Cancel(id); }
  absl::StatusOr<ReceivedBatch> Receive(absl::Time deadline) override {
    return inner_->Receive(deadline);
  }
  void ScreenSenders(SenderScreen screen) override { inner_->ScreenSenders(std::move(screen)); }
  Metrics GetMetrics() const override { return inner_->GetMetrics(); }

 private:
  const std::unique_ptr<Transport> inner_;
};

// A caller's endpoints by peer address: connected on first use and kept; Forget drops one (after
// a failed transfer, so the next use connects again). Thread-safe.
class PeerMap {
 public:
  explicit PeerMap(Transport& transport) : transport_(transport) {}

  absl::StatusOr<PeerId> Get(const std::string& address);
  void Forget(const std::string& address);

 private:
  Transport& transport_;
  absl::Mutex mu_;
  std::map<std::string, PeerId> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::transport

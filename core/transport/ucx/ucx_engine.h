// Internal: the UcxTransport engine. See ucx_transport.h for the contract and design.
//
// Concurrency: mu_ guards every member below it and every UCX call; UCX callbacks run inside
// ucp_worker_progress / ucp_*_nbx under mu_ (in the progress thread or a caller that drives the
// worker, see DriveUntil) and never lock. cv_ is signalled on any completion,
// failure, freed in-flight space or ready batch. Callback contexts (Outbound, Inbound, peers)
// live in unique_ptrs so their addresses stay stable while UCX holds them; their fields are
// guarded by their engine's mu_ too (not annotated: the analysis cannot tie `o->engine->mu_` to
// the `this->mu_` the engine holds).
#pragma once

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "core/transport/transport.h"
#include "core/transport/ucx/ucx_buffer_pool.h"
#include "core/transport/ucx/ucx_transport.h"
#include "core/transport/ucx/ucx_wire.h"

namespace glimpse::transport::ucx_internal {

class UcxEngine;

struct RequestCtx {       // user_data of one UCX request
  void* owner = nullptr;  // Outbound* or Inbound*
  uint32_t index = 0;     // buffer index; kHeaderIndex for the header
  void* request = nullptr;
  // Receives: set while ucp_tag_recv_nbx runs. UCX 1.13 may call a receive's callback inside the
  // call (a rendezvous it truncates) and still return the request, already released.
  bool posting = false;
  bool called_back = false;  // the callback ran during the call
};
inline constexpr uint32_t kHeaderIndex = ~0u;

struct EndpointState {  // an endpoint we opened to a receiver
  UcxEngine* engine = nullptr;
  ucp_ep_h ep = nullptr;
  absl::Status error;       // set once the endpoint failed or was torn down
  bool failed = false;      // UCX reported it failed (error callback): only then force-closed
  bool flush_done = false;  // Connect's wireup flush; here so a late callback finds it alive
  ucs_status_t flush_status = UCS_OK;
  uint32_t remote_id = 0;              // remote engine id
  bool peer_failure_detection = true;  // false: UCP_ERR_HANDLING_MODE_NONE (shared memory)
};

struct Outbound {
  UcxEngine* engine = nullptr;
  TransferId id = 0;
  PeerId peer = 0;
  uint64_t bytes = 0;
  absl::Time deadline;
  std::vector<uint64_t> sizes;
  std::vector<uint8_t> header;  // must live until the header send completes
  std::vector<RequestCtx> ctx;  // [n + 1]: data requests, then the header
  int outstanding = 0;          // posted sends UCX has not called back yet
  absl::Status status;
  bool done = false;                               // final status reported to the caller
  absl::Time aborted_at = absl::InfiniteFuture();  // Cancel / deadline / shutdown time
};

struct Inbound {
  UcxEngine* engine = nullptr;
  uint64_t key = 0;  // sender << 32 | seq
  ucx_wire::BatchHeader header;
  std::vector<PooledBuffer> buffers;
  std::vector<uint32_t> crcs;  // CRC32C of each landed buffer (see UcxEngine::landed_)
  std::vector<RequestCtx> ctx;
  int outstanding = 0;
  int unposted = 0;       // buffers waiting for the sender's receive window (SenderWindow)
  int crc_pending = 0;    // landed buffers not yet checksummed; `in` is not freed while > 0
  int posting = 0;        // receives being posted; `in` is not freed while > 0
  bool windowed = false;  // from a local shared-memory sender: posted through its SenderWindow
  // Refused (Options::max_receive_bytes): reported at once, its buffers received into
  // UcxEngine::discard_ so that UCX drops them, forgotten when they have or when they stall.
  bool discarding = false;
  absl::Time last_progress;
  absl::Status status;
  bool reported = false;  // handed to the ready queue (OK or error)
};

// Waits on cv (with mu held) in slices of at most 100 ms until pred() or the deadline; a slice
// also re-checks a pred() that changes without a signal (Connect's flush callback). pred runs
// with mu held. Returns pred().
template <typename Pred>
bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline, Pred pred)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  while (!pred()) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return pred();
    cv.WaitWithTimeout(&mu, std::min(left, absl::Milliseconds(100)));
  }
  return true;
}

// How an endpoint is closed. NOTE: UCX 1.13 asserts (ucp_request.c:684 "got REP message") when
// an endpoint is force-closed, or its worker destroyed, while wireup messages are still pending
// on it (tcp under load). kForce is therefore used only for endpoints UCX already reported as
// failed; everything else is flush-closed, which completes once wireup and all sends are done.
enum class CloseMode { kFlush, kForce };

// An aborted transfer whose sends UCX has not released within this time is reported done anyway
// (see UcxEngine::CheckDeadlines); the engine destructor waits this long for a clean shutdown.
inline constexpr absl::Duration kAbortGrace = absl::Seconds(2);
inline constexpr absl::Duration kShutdownDrain = absl::Seconds(5);

struct ReadyItem {
  absl::Status status;             // error of a failed batch, or OK
  std::unique_ptr<Inbound> batch;  // set when OK
};

class UcxEngine : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<UcxEngine>> Create(const UcxOptions& options);
  ~UcxEngine() override;

  std::string LocalAddress() const override { return address_; }
  absl::StatusOr<PeerId> Connect(std::string_view peer_address) override;
  absl::Status Disconnect(PeerId peer) override;
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const void* data,
                                                               size_t size) override;
  absl::StatusOr<TransferId> Submit(PeerId peer, std::span<const std::span<const uint8_t>> buffers,
                                    const SubmitOptions& options) override;
  absl::StatusOr<TransferStatus> GetStatus(TransferId id) override;
  absl::Status Wait(TransferId id, absl::Time deadline) override;
  absl::Status Cancel(TransferId id) override;
  absl::StatusOr<ReceivedBatch> Receive(absl::Time deadline) override;
  // Test hook: while on, batches submitted with a checksum carry a wrong one, so that their
  // receiver must report DataLoss.
  void TEST_CorruptChecksums(bool on) { test_corrupt_checksums_ = on; }
  // The screen runs in OnHeaderBytes, under mu_: a refused batch goes the way of one over the
  // receive budget (RefuseBatch: drained into discard_).
  void ScreenSenders(SenderScreen screen) override;
  Metrics GetMetrics() const override;

  // UCX calls back only inside ucp_worker_progress / ucp_*_nbx, which run under mu_: the static
  // trampolines in the .cc files call this before the handlers below, so that the analysis knows.
  void AssertInUcxCallback() const ABSL_ASSERT_EXCLUSIVE_LOCK(mu_) { mu_.AssertHeld(); }

  // Callbacks (static trampolines in the .cc files call these under mu_).
  void OnSendDone(Outbound* o, RequestCtx* c, ucs_status_t status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRecvDone(Inbound* in, RequestCtx* c, ucs_status_t status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBufferLanded(Inbound* in, uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops one landed buffer and checksums it with mu_ released meanwhile.
  void ChecksumOneLanded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnEndpointError(EndpointState* e, ucs_status_t status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnHeaderBytes(std::span<const uint8_t> bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A header receive that failed (a header longer than any valid one is truncated).
  void OnHeaderFailed(ucs_status_t status, size_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnregisterMemory(ucp_mem_h memh, const uint8_t* start) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit UcxEngine(const UcxOptions& options);
  absl::Status Init();
  // The progress thread: runs the worker while no caller does (see DriveUntil).
  void ProgressLoop();
  // One pass over the worker under mu_: ucp_worker_progress, new batch headers, endpoints to
  // close. Returns whether UCX reported work. Run by the progress thread, or by a caller that
  // drives the worker itself (DriveUntil).
  bool ProgressOnce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Transfer deadlines and receive stalls, at most once a millisecond.
  void MaybeCheckDeadlines(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spin state of whoever holds the worker.
  struct WorkerTurn {
    uint32_t passes = 0;
    bool worked = false;  // since the last clock reading
    absl::Time last_work;
  };
  // One step of the worker's holder: a ProgressOnce pass; once UcxOptions::progress_spin has gone
  // by without work, a sleep on UCX's event fd instead (mu_ released; woken by UCX events and
  // Wake(), at the latest at `wake_by` or after kMaxWorkerSleep, for deadlines).
  void TakeTurn(WorkerTurn& t, absl::Time wake_by) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Progresses the worker in the calling thread until pred() or the deadline, sleeping on UCX's
  // event fd itself when idle. One caller drives at a time (driving_); the progress thread stays
  // off the worker meanwhile and for kDriverGrace after a caller leaves (ProgressThreadStaysOff),
  // so that a busy sender (Submit, Wait, Submit...) or receiver (Receive, Receive...) is one
  // thread, as in ucx_perftest: threads taking turns move the socket and buffers between cores'
  // caches at every turn (bench/RESULTS.md, "Transport"). pred runs with mu_ held (mu_ is
  // released between passes). Returns pred().
  bool DriveUntil(absl::Time deadline, absl::FunctionRef<bool()> pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets a Receive() caller that has work waiting (a landed buffer to checksum, a batch to take)
  // have mu_: releases it for kHandOffPause and returns true, else returns false at once.
  // The mutex is not fair: without the pause the progress loop takes mu_ back at once, the
  // caller starves, and unverified buffers pile up, each a pool buffer the next batch allocates
  // anew (memory grows without bound under a fast sender).
  bool HandOffToReceiver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr absl::Duration kHandOffPause = absl::Microseconds(20);
  // The progress thread takes the worker back only this long after the last caller stopped
  // driving it: work a caller posts and then does not wait for (a Submit without Wait, a batch
  // that lands between Receive() calls) waits at most this long to be progressed.
  // `drives_seen`: the progress thread's copy of drives_, so that it reads the clock only after
  // a caller drove.
  bool ProgressThreadStaysOff(uint64_t& drives_seen) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr absl::Duration kDriverGrace = absl::Milliseconds(1);
  static constexpr absl::Duration kMaxWorkerSleep = absl::Milliseconds(2);
  static constexpr absl::Duration kMaxCallerWait = absl::Milliseconds(100);
  void PollHeaders() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckDeadlines(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `local`: a peer on this host that takes shared-memory endpoints
  // (UcxOptions::local_shared_memory), connected without UCX error handling; otherwise with it
  // where UCX offers a lane.
  absl::StatusOr<ucp_ep_h> CreateEndpoint(std::span<const uint8_t> ucp_address, EndpointState* e,
                                          bool local) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TearDown(EndpointState* e, absl::Status why, CloseMode mode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Drained() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DrainForShutdown() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelSends(Outbound* o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOutbound(Outbound* o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailInbound(Inbound* in, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts the receive of one announced buffer into a pool buffer; records a failure in
  // in->status. Returns whether UCX holds the request (it did not complete at once).
  bool PostReceive(Inbound* in, uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a batch header comes from a local shared-memory sender (see SenderWindow).
  bool FromLocalSender(const ucx_wire::BatchHeader& h) const;
  // Posts the sender's waiting buffers while its window has room.
  void PostWindowed(uint32_t sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the sender's window once nothing waits in it or is posted through it.
  void DropWindowIfIdle(uint32_t sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the sender's batches that have buffers waiting for its window. Called with the windows
  // held (hold_windows_), so that a cancel's callback posts none of them first.
  // (DeadlineExceeded: "batch <seq> from engine <sender>: <why>").
  void FailWaitingBatches(uint32_t sender, std::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeRetireInbound(Inbound* in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `h`'s bytes from the receive budget, or says why not (ResourceExhausted).
  absl::Status AdmitToBudget(const ucx_wire::BatchHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseBudget(const ucx_wire::BatchHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Refuses an announced batch: reports `why`, and posts its buffers into discard_.
  void RefuseBatch(ucx_wire::BatchHeader h, uint64_t key, absl::Status why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels the receives UCX still holds for `in` (they call back with UCS_ERR_CANCELED).
  void CancelPosted(Inbound* in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PostSends(Outbound* o, EndpointState* e, uint32_t seq,
                         std::span<const std::span<const uint8_t>> buffers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(Outbound* o, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ucp_mem_h FindMemh(const uint8_t* p, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();

  // Written before the progress thread starts (constructor, Init), then constant.
  const UcxOptions options_;
  uint32_t engine_id_ = 0;
  std::string address_;
  uint64_t shm_host_ = 0;  // in address_: LocalHostKey() if local_shared_memory applies, else 0
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::shared_ptr<BufferPool> pool_;
  std::atomic<bool> stop_{false};
  std::atomic<int> receivers_{0};  // threads inside Receive()
  std::thread progress_;
  // The progress thread waits here, with mu_ (StaysOff).
  absl::CondVar progress_parked_cv_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  Metrics metrics_ ABSL_GUARDED_BY(mu_);
  SenderScreen screen_ ABSL_GUARDED_BY(mu_);  // empty: every sender
  // A Wait() or Receive() caller progresses the worker (DriveUntil).
  bool driving_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t drives_ ABSL_GUARDED_BY(mu_) = 0;  // times a caller took the worker
  // When the last driving caller left.
  absl::Time driver_left_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_deadline_check_ ABSL_GUARDED_BY(mu_);
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  TransferId next_transfer_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<PeerId, std::unique_ptr<EndpointState>> peers_ ABSL_GUARDED_BY(mu_);
  // Kept: UCX may still call back.
  std::vector<std::unique_ptr<EndpointState>> dead_endpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<EndpointState*> to_close_ ABSL_GUARDED_BY(mu_);  // failed, close soon
  std::vector<void*> closing_ ABSL_GUARDED_BY(mu_);            // ep close requests
  bool worker_flushed_ ABSL_GUARDED_BY(mu_) = false;  // shutdown's ucp_worker_flush_nbx completed
  std::map<TransferId, std::unique_ptr<Outbound>> transfers_ ABSL_GUARDED_BY(mu_);
  // Waited-for transfers whose sends UCX still holds (aborted ones): freed on the last callback.
  std::map<TransferId, std::unique_ptr<Outbound>> retiring_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Inbound>> inbound_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the receive budget in use
  // By sender; entries erased at 0.
  std::map<uint32_t, size_t> sender_pending_bytes_ ABSL_GUARDED_BY(mu_);
  // Refused batches' bytes land here and are dropped (receives of 64 bytes: UCX truncates).
  alignas(64) uint8_t discard_[64] ABSL_GUARDED_BY(mu_);
  struct BufferRef {  // one buffer of an inbound batch
    Inbound* in;
    uint32_t index;
  };
  // Buffers that landed but whose CRC32C is not computed yet. Receive() callers compute them, one
  // buffer at a time and outside mu_, while the bytes UCX just wrote are still in cache (and,
  // when another thread progresses the worker, while it moves the next buffers).
  std::deque<BufferRef> landed_ ABSL_GUARDED_BY(mu_);
  // UcxOptions::local_receive_window_bytes, per local sender engine: its announced buffers not yet
  // posted, in arrival order, and the bytes of its posted ones.
  struct SenderWindow {
    std::deque<BufferRef> waiting;
    size_t posted_bytes = 0;
  };
  std::map<uint32_t, SenderWindow> windows_ ABSL_GUARDED_BY(mu_);
  // Set while PostWindowed runs or CheckDeadlines fails stalled batches: PostWindowed then posts
  // nothing (a cancel's callback may call into it) and no window is dropped (PostWindowed holds a
  // reference to its window).
  bool hold_windows_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<ReadyItem> ready_ ABSL_GUARDED_BY(mu_);
  struct Region {
    const uint8_t* end;
    ucp_mem_h memh;
  };
  std::map<const uint8_t*, Region> regions_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> test_corrupt_checksums_{false};  // TEST_CorruptChecksums
};

}  // namespace glimpse::transport::ucx_internal

// UcxEngine: setup, the progress thread, endpoints and memory registration.
// Send and receive paths are in ucx_send.cc and ucx_receive.cc.
#include "core/transport/ucx/ucx_engine.h"

#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/transport/ucx/ucx_locality.h"
#include "core/transport/ucx/ucx_transport.h"

namespace glimpse::transport {
namespace ucx_internal {
namespace {

// The progress loop reads the clock (for deadlines and its spin budget) every kClockEvery
// iterations: reading it on every iteration cost ~7 % of a busy sender's cycles.
constexpr uint32_t kClockEvery = 32;

absl::Status UcsError(const std::string& what, ucs_status_t s) {
  return absl::InternalError(absl::StrCat(what, ": ", ucs_status_string(s)));
}

void EndpointErrorCb(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<EndpointState*>(arg);
  e->engine->AssertInUcxCallback();
  e->engine->OnEndpointError(e, status);
}

class UcxRegion : public MemoryRegion {
 public:
  UcxRegion(UcxEngine* engine, ucp_mem_h memh, const uint8_t* data, size_t size)
      : engine_(engine), memh_(memh), data_(data), size_(size) {}
  ~UcxRegion() override { engine_->UnregisterMemory(memh_, data_); }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  UcxEngine* engine_;
  ucp_mem_h memh_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

UcxEngine::UcxEngine(const UcxOptions& options)
    : options_(options), pool_(std::make_shared<BufferPool>(options.receive_pool_bytes)) {
  std::random_device rd;
  engine_id_ = (rd() ^ (static_cast<uint32_t>(getpid()) * 2654435761u)) & ucx_wire::kEngineIdMask;
  if (engine_id_ == 0) engine_id_ = 1;
}

absl::StatusOr<std::unique_ptr<UcxEngine>> UcxEngine::Create(const UcxOptions& options) {
  if (options.max_inflight_bytes == 0) return absl::InvalidArgumentError("max_inflight_bytes 0");
  if (options.progress_spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("progress_spin < 0");
  }
  std::unique_ptr<UcxEngine> engine(new UcxEngine(options));
  RETURN_IF_ERROR(engine->Init());
  engine->progress_ = std::thread([e = engine.get()] { e->ProgressLoop(); });
  return engine;
}

absl::Status UcxEngine::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);  // honours UCX_TLS etc.
  if (s != UCS_OK) return UcsError("ucp_config_read", s);
  for (const UcxSetting& d : UcxDefaultSettings()) {
    if (std::getenv(d.env) != nullptr) continue;  // the environment's value wins
    if ((s = ucp_config_modify(config, d.key, d.value)) != UCS_OK) {
      log::Warning("UCX setting not applied", {{"key", d.env}, {"error", ucs_status_string(s)}});
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcsError("ucp_init (check UCX_TLS)", s);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call is under mu_
  if ((s = ucp_worker_create(context_, &wp, &worker_)) != UCS_OK) {
    return UcsError("ucp_worker_create", s);
  }
  if ((s = ucp_worker_get_efd(worker_, &efd_)) != UCS_OK) return UcsError("ucp_worker_get_efd", s);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  if ((s = ucp_worker_get_address(worker_, &addr, &len)) != UCS_OK) {
    return UcsError("ucp_worker_get_address", s);
  }
  shm_host_ =
      options_.local_shared_memory && ucx_locality::TlsHasSharedMemory(std::getenv("UCX_TLS"))
          ? ucx_locality::LocalHostKey()
          : 0;
  address_ =
      ucx_wire::WrapAddress(engine_id_, shm_host_, {reinterpret_cast<const uint8_t*>(addr), len});
  ucp_worker_release_address(worker_, addr);
  return absl::OkStatus();
}

UcxEngine::~UcxEngine() {
  stop_ = true;
  if (progress_.joinable()) {
    Wake();
    progress_parked_cv_.SignalAll();
    progress_.join();
  }
  if (worker_ != nullptr) {
    absl::MutexLock l(&mu_);
    if (!DrainForShutdown()) {
      // NOTE: UCX still holds requests or endpoints after kShutdownDrain (a peer that neither
      // completes nor fails). ucp_worker_destroy would purge them and may trip UCX 1.13's
      // pending-wireup assertion, which aborts the process. The least dangerous way on is to
      // leak: the worker and context stay, never progressed again, so no callback can run, and
      // the objects UCX points into (transfers, batches, endpoint states) are released, not freed.
      log::Error("UCX engine shutdown did not drain; leaking its UCX worker",
                 {{"engine", absl::StrFormat("%07x", engine_id_)},
                  {"closing_endpoints", static_cast<long long>(closing_.size())},
                  {"transfers", static_cast<long long>(transfers_.size() + retiring_.size())},
                  {"inbound_batches", static_cast<long long>(inbound_.size())}});
      for (auto* m : {&transfers_, &retiring_}) {
        for (auto& [id, o] : *m) o.release();
      }
      for (auto& [key, in] : inbound_) in.release();
      for (auto& [id, e] : peers_) e.release();
      for (auto& e : dead_endpoints_) e.release();
      return;
    }
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

bool UcxEngine::Drained() const {
  return closing_.empty() && worker_flushed_ && retiring_.empty() && inbound_.empty() &&
         std::all_of(transfers_.begin(), transfers_.end(),
                     [](const auto& t) { return t.second->outstanding == 0; });
}

// Called with the progress thread stopped. Withdraws every posted request, flush-closes every
// endpoint (force only for failed ones) and progresses the worker until UCX has released all of
// them, at most kShutdownDrain. A worker flush also covers the endpoints UCX created itself for
// incoming connections, whose pending wireup messages ucp_worker_destroy would trip over.
bool UcxEngine::DrainForShutdown() {
  absl::Status why = absl::CancelledError("engine destroyed");
  for (auto& [id, o] : transfers_) {
    if (!o->done && o->status.ok()) o->status = why;
  }
  std::vector<void*> posted;  // a cancel may retire its owner: collect first
  for (auto* m : {&transfers_, &retiring_}) {
    for (auto& [id, o] : *m) {
      for (auto& c : o->ctx) {
        if (c.request != nullptr) posted.push_back(c.request);
      }
    }
  }
  for (auto& [key, in] : inbound_) {
    for (auto& c : in->ctx) {
      if (c.request != nullptr) posted.push_back(c.request);
    }
  }
  for (void* r : posted) ucp_request_cancel(worker_, r);
  // Landed buffers no Receive() will checksum now: their batches are dropped.
  for (const BufferRef& item : landed_) --item.in->crc_pending;
  landed_.clear();
  std::vector<Inbound*> idle;  // nothing posted: no callback would retire them
  for (auto& [key, in] : inbound_) {
    if (in->outstanding == 0) idle.push_back(in.get());
  }
  for (Inbound* in : idle) {
    if (in->reported) {
      MaybeRetireInbound(in);  // failed earlier, kept only for its checksums
    } else {
      FailInbound(in, why);  // retires it
    }
  }
  for (auto& [id, e] : peers_) {
    TearDown(e.get(), why, e->failed ? CloseMode::kForce : CloseMode::kFlush);
  }
  to_close_.clear();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = [](void* r, ucs_status_t, void* user) {
    *static_cast<bool*>(user) = true;
    ucp_request_free(r);
  };
  p.user_data = &worker_flushed_;
  void* r = ucp_worker_flush_nbx(worker_, &p);
  worker_flushed_ = !UCS_PTR_IS_PTR(r);
  absl::Time give_up = absl::Now() + kShutdownDrain;
  while (!Drained() && absl::Now() < give_up) {
    ucp_worker_progress(worker_);
    std::erase_if(closing_, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }
  return Drained();
}

bool UcxEngine::HandOffToReceiver() {
  if (receivers_.load(std::memory_order_relaxed) == 0 || (ready_.empty() && landed_.empty())) {
    return false;
  }
  mu_.Unlock();
  absl::SleepFor(kHandOffPause);
  mu_.Lock();
  return true;
}

void UcxEngine::Wake() {
  if (worker_ != nullptr) ucp_worker_signal(worker_);
}

bool UcxEngine::ProgressOnce() {
  bool worked = ucp_worker_progress(worker_) > 0;
  PollHeaders();
  for (EndpointState* e : to_close_) TearDown(e, e->error, CloseMode::kForce);
  to_close_.clear();
  std::erase_if(closing_, [](void* r) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    return true;
  });
  return worked;
}

void UcxEngine::MaybeCheckDeadlines(absl::Time now) {
  if (now - last_deadline_check_ < absl::Milliseconds(1)) return;
  CheckDeadlines(now);
  last_deadline_check_ = now;
}

void UcxEngine::TakeTurn(WorkerTurn& t, absl::Time wake_by) {
  t.worked |= ProgressOnce();
  if (++t.passes % kClockEvery != 0) return;
  const absl::Time now = absl::Now();
  MaybeCheckDeadlines(now);
  if (t.worked) {
    t.worked = false;
    t.last_work = now;
    return;
  }
  if (now - t.last_work < options_.progress_spin) return;
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events pending: keep polling
  const absl::Duration sleep = std::clamp(wake_by - now, absl::ZeroDuration(), kMaxWorkerSleep);
  const timespec ts = absl::ToTimespec(sleep);
  mu_.Unlock();
  pollfd pfd{efd_, POLLIN, 0};
  ppoll(&pfd, 1, &ts, nullptr);
  mu_.Lock();
  t.last_work = absl::Now() - options_.progress_spin / 2;  // after a wake-up, spin half as long
}

bool UcxEngine::ProgressThreadStaysOff(uint64_t& drives_seen) const {
  if (driving_) return true;
  if (drives_ == drives_seen) return false;  // no caller drove since: no clock reading needed
  if (absl::Now() - driver_left_ < kDriverGrace) return true;
  drives_seen = drives_;
  return false;
}

void UcxEngine::ProgressLoop() {
  WorkerTurn turn{.last_work = absl::Now()};
  uint64_t drives_seen = 0;
  absl::MutexLock l(&mu_);
  while (!stop_.load(std::memory_order_relaxed)) {
    if (ProgressThreadStaysOff(drives_seen)) {
      progress_parked_cv_.WaitWithTimeout(&mu_, kDriverGrace);
      turn.last_work = absl::Now();
      continue;
    }
    turn.worked |= HandOffToReceiver();
    TakeTurn(turn, absl::InfiniteFuture());
    mu_.Unlock();  // others may take mu_ between passes
    mu_.Lock();
  }
}

bool UcxEngine::DriveUntil(absl::Time deadline, absl::FunctionRef<bool()> pred) {
  bool mine = false;  // this caller holds the worker (driving_)
  WorkerTurn turn;
  while (!pred()) {
    if (!mine && !driving_) {
      mine = driving_ = true;
      ++drives_;
      turn.last_work = absl::Now();
    }
    if (mine) {
      TakeTurn(turn, deadline);
      if (turn.passes % kClockEvery != 0) {
        mu_.Unlock();  // others may take mu_ between passes
        mu_.Lock();
        continue;
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    // Another caller drives: its completions signal cv_ (and it signals when it leaves).
    if (!mine) cv_.WaitWithTimeout(&mu_, std::min(deadline - now, kMaxCallerWait));
  }
  if (mine) {
    driving_ = false;
    driver_left_ = absl::Now();
    cv_.SignalAll();  // a caller waiting behind this one drives next
  }
  return pred();
}

absl::StatusOr<ucp_ep_h> UcxEngine::CreateEndpoint(std::span<const uint8_t> ucp_address,
                                                   EndpointState* e, bool local) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.address = reinterpret_cast<const ucp_address_t*>(ucp_address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = EndpointErrorCb;
  p.err_handler.arg = e;
  auto without_error_handling = [&] {
    p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    p.field_mask &= ~UCP_EP_PARAM_FIELD_ERR_HANDLER;
    e->peer_failure_detection = false;
  };
  // A peer on this host (UcxOptions::local_shared_memory): without error handling, so that UCX may
  // pick its shared-memory transports.
  if (local) without_error_handling();
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucp_ep_create(worker_, &p, &ep);
  if (s == UCS_ERR_UNREACHABLE && !local) {
    // UCX 1.13's shared-memory transports (posix, sysv) cannot detect peer failure, so PEER
    // mode finds no lane there. Retry without UCX error handling; keep that endpoint only when
    // Options allow it (failures then surface only through our deadlines and stall timeout).
    without_error_handling();
    s = ucp_ep_create(worker_, &p, &ep);
    if (s == UCS_OK && !options_.allow_no_peer_failure_detection) {
      e->ep = ep;
      TearDown(e, absl::OkStatus(), CloseMode::kFlush);
      return absl::FailedPreconditionError(absl::StrFormat(
          "no UCX transport to engine %07x can detect peer failure (UCX 1.13 posix/sysv "
          "cannot): add tcp to UCX_TLS or set UcxOptions::allow_no_peer_failure_detection",
          e->remote_id));
    }
  }
  if (s != UCS_OK) {
    return absl::UnavailableError(
        absl::StrFormat("cannot reach UCX engine %07x: %s", e->remote_id, ucs_status_string(s)));
  }
  if (local) {
    ++metrics_.local_peers;
    log::Info("UCX endpoint to an engine on this host: shared memory, no UCX failure detection",
              {{"engine", absl::StrFormat("%07x", engine_id_)},
               {"peer", absl::StrFormat("%07x", e->remote_id)}});
  }
  return ep;
}

absl::StatusOr<PeerId> UcxEngine::Connect(std::string_view peer_address) {
  ASSIGN_OR_RETURN(ucx_wire::ParsedAddress a, ucx_wire::UnwrapAddress(peer_address));
  absl::MutexLock l(&mu_);
  auto e = std::make_unique<EndpointState>();
  e->engine = this;
  e->remote_id = a.engine_id;
  ASSIGN_OR_RETURN(
      e->ep, CreateEndpoint(a.ucp_address, e.get(), shm_host_ != 0 && a.shm_host == shm_host_));
  // Flush: returns once wireup is complete (or failed). NOTE: UCX 1.13 asserts when an endpoint
  // is force-closed while its wireup messages are pending, so no endpoint is handed out earlier.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = [](void* r, ucs_status_t st, void* user) {
    auto* f = static_cast<EndpointState*>(user);
    f->flush_done = true;
    f->flush_status = st;
    ucp_request_free(r);
  };
  p.user_data = e.get();
  void* r = ucp_ep_flush_nbx(e->ep, &p);
  if (!UCS_PTR_IS_PTR(r)) {
    e->flush_done = true;
    e->flush_status = UCS_PTR_STATUS(r);
  }
  Wake();
  absl::Time deadline = absl::Now() + options_.default_transfer_timeout;
  EndpointState* raw = e.get();
  WaitUntil(cv_, mu_, deadline, [raw] { return raw->flush_done || !raw->error.ok(); });
  absl::Status failed =
      !e->error.ok()   ? e->error
      : !e->flush_done ? absl::DeadlineExceededError("UCX wireup timed out")
      : e->flush_status != UCS_OK
          ? absl::UnavailableError(absl::StrFormat("cannot reach UCX engine %07x: %s", e->remote_id,
                                                   ucs_status_string(e->flush_status)))
          : absl::OkStatus();
  PeerId id = next_peer_++;
  peers_[id] = std::move(e);  // kept (also on failure) until the engine ends: UCX may call back
  if (!failed.ok()) {
    if (!raw->flush_done) {  // wireup still pending: closed (flush) by the engine destructor
      raw->error = failed;
      return failed;
    }
    TearDown(raw, failed, raw->failed ? CloseMode::kForce : CloseMode::kFlush);
    return failed;
  }
  return id;
}

absl::Status UcxEngine::Disconnect(PeerId peer) {
  absl::MutexLock l(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("peer ", peer));
  absl::Status why = absl::CancelledError(absl::StrCat("peer ", peer, " disconnected"));
  for (auto& [id, o] : transfers_) {
    if (o->peer == peer) AbortLocked(o.get(), why);
  }
  TearDown(it->second.get(), why, it->second->failed ? CloseMode::kForce : CloseMode::kFlush);
  dead_endpoints_.push_back(std::move(it->second));
  peers_.erase(it);
  Wake();
  return absl::OkStatus();
}

// Closes e's endpoint; later Submits to it fail with `why`. kFlush lets UCX finish wireup and
// the endpoint's outstanding sends first (cancel them beforehand to end them early); kForce fails
// them at once and is safe only for an endpoint UCX reported as failed (see CloseMode).
void UcxEngine::TearDown(EndpointState* e, absl::Status why, CloseMode mode) {
  if (e->error.ok()) e->error = std::move(why);
  if (e->ep == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = mode == CloseMode::kForce ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* r = ucp_ep_close_nbx(e->ep, &p);
  e->ep = nullptr;
  if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
}

void UcxEngine::OnEndpointError(EndpointState* e, ucs_status_t status) {
  absl::Status why = absl::UnavailableError(absl::StrFormat(
      "UCX engine %07x failed or is unreachable: %s", e->remote_id, ucs_status_string(status)));
  if (e->error.ok()) e->error = why;
  e->failed = true;
  to_close_.push_back(e);  // closed by the progress loop, outside UCX's callback
  cv_.SignalAll();
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> UcxEngine::RegisterMemory(const void* data,
                                                                        size_t size) {
  if (data == nullptr || size == 0) return absl::InvalidArgumentError("empty memory region");
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = const_cast<void*>(data);
  p.length = size;
  ucp_mem_h memh = nullptr;
  absl::MutexLock l(&mu_);
  ucs_status_t s = ucp_mem_map(context_, &p, &memh);
  if (s != UCS_OK) return UcsError(absl::StrCat("ucp_mem_map of ", size, " bytes"), s);
  const auto* start = static_cast<const uint8_t*>(data);
  regions_[start] = Region{start + size, memh};
  return std::make_unique<UcxRegion>(this, memh, start, size);
}

void UcxEngine::UnregisterMemory(ucp_mem_h memh, const uint8_t* start) {
  absl::MutexLock l(&mu_);
  regions_.erase(start);
  ucp_mem_unmap(context_, memh);
}

ucp_mem_h UcxEngine::FindMemh(const uint8_t* p, size_t n) {
  auto it = regions_.upper_bound(p);
  if (it == regions_.begin()) return nullptr;
  --it;
  return p + n <= it->second.end ? it->second.memh : nullptr;
}

void UcxEngine::ScreenSenders(SenderScreen screen) {
  absl::MutexLock l(&mu_);
  screen_ = std::move(screen);
}

Metrics UcxEngine::GetMetrics() const {
  absl::MutexLock l(&mu_);
  Metrics m = metrics_;
  m.receive_pending_batches = std::count_if(inbound_.begin(), inbound_.end(),
                                            [](const auto& kv) { return !kv.second->reported; });
  m.receive_pending_bytes = pending_bytes_;
  return m;
}

}  // namespace ucx_internal

// RX_SEG_SIZE: UCX's TCP transport reads a socket in pieces of this size (64 KiB by default). With
// peer error handling every rendezvous, also between processes on one host, moves over TCP (see
// ucx_transport.h), and 512 KiB pieces took ucx_perftest -e tag_bw at 1 MiB from 4.0-4.3 to 6.4
// GB/s (1 MiB pieces: 6.8; 256 KiB: 5.9-6.1) and 64 KiB messages from 2.2 to 2.7. The cost is
// memory: receive segments are pooled per worker and held only while a message is read. Only
// TCP's interface configuration has a field of this name (UCX 1.13).
std::span<const UcxSetting> UcxDefaultSettings() {
  static constexpr UcxSetting kDefaults[] = {{"UCX_TCP_RX_SEG_SIZE", "RX_SEG_SIZE", "512K"}};
  return kDefaults;
}

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const UcxOptions& options) {
  ASSIGN_OR_RETURN(auto engine, ucx_internal::UcxEngine::Create(options));
  return std::unique_ptr<Transport>(std::move(engine));
}

void TEST_CorruptUcxChecksums(Transport& ucx, bool on) {
  static_cast<ucx_internal::UcxEngine&>(ucx).TEST_CorruptChecksums(on);
}

}  // namespace glimpse::transport

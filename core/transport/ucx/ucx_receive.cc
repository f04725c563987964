// UcxEngine receive side: headers are probed by whoever progresses the worker (the progress
// thread or a Receive() caller); each posts one tag receive per buffer into pooled memory (for a
// local shared-memory sender, in its receive window's turn: SenderWindow, PostWindowed); whole
// batches queue for Receive(), which verifies the CRC32C. Each buffer is checksummed as soon as
// it lands, by a Receive() caller outside the lock (see UcxEngine::landed_), while the bytes UCX
// just wrote are still in cache; a batch is ready when every buffer has landed and been
// checksummed. Receive() then combines the per-buffer values (Crc32cCombine) and compares them
// with the header's CRC.
#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/kvpage/crc32c.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/ucx/ucx_engine.h"

namespace glimpse::transport::ucx_internal {

namespace {

struct HeaderRecv {
  UcxEngine* engine;
  size_t length;               // as announced
  std::vector<uint8_t> bytes;  // at most ucx_wire::kMaxHeaderBytes: a longer one is truncated
};

void HeaderCb(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
  std::unique_ptr<HeaderRecv> h(static_cast<HeaderRecv*>(user_data));
  h->engine->AssertInUcxCallback();
  if (status == UCS_OK) {
    h->engine->OnHeaderBytes(h->bytes);
  } else {
    h->engine->OnHeaderFailed(status, h->length);
  }
  ucp_request_free(request);
}

void DataCb(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
  auto* c = static_cast<RequestCtx*>(user_data);
  auto* in = static_cast<Inbound*>(c->owner);
  in->engine->AssertInUcxCallback();
  in->engine->OnRecvDone(in, c, status);
  ucp_request_free(request);
}

// Gives the buffers of a delivered batch back to the pool when the caller drops it.
class PoolStorage : public ReceivedBatch::Storage {
 public:
  PoolStorage(std::shared_ptr<BufferPool> pool, std::vector<PooledBuffer> buffers)
      : pool_(std::move(pool)), buffers_(std::move(buffers)) {}
  ~PoolStorage() override {
    for (auto& b : buffers_) pool_->Put(std::move(b));
  }

 private:
  std::shared_ptr<BufferPool> pool_;
  std::vector<PooledBuffer> buffers_;
};

absl::Status RecvError(const Inbound& in, uint32_t index, ucs_status_t s) {
  std::string what = absl::StrFormat("batch %d from engine %07x, buffer %d: %s", in.header.seq,
                                     in.header.sender, index, ucs_status_string(s));
  if (s == UCS_ERR_MESSAGE_TRUNCATED) return absl::DataLossError(what);
  if (s == UCS_ERR_CANCELED) return absl::CancelledError(what);
  return absl::UnavailableError(what);
}

}  // namespace

void UcxEngine::PollHeaders() {
  for (int i = 0; i < 64; ++i) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg =
        ucp_tag_probe_nb(worker_, ucx_wire::kKindHeader, ucx_wire::kKindMask, 1, &info);
    if (msg == nullptr) return;
    // Never more than the longest valid header, whatever the peer announces.
    auto* h = new HeaderRecv{
        this, info.length, std::vector<uint8_t>(std::min(info.length, ucx_wire::kMaxHeaderBytes))};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = HeaderCb;
    p.user_data = h;
    void* r = ucp_tag_msg_recv_nbx(worker_, h->bytes.data(), h->bytes.size(), msg, &p);
    if (UCS_PTR_IS_PTR(r)) continue;  // HeaderCb owns h now
    std::unique_ptr<HeaderRecv> owned(h);
    if (UCS_PTR_STATUS(r) == UCS_OK) {
      OnHeaderBytes(h->bytes);
    } else {
      OnHeaderFailed(UCS_PTR_STATUS(r), info.length);
    }
  }
}

void UcxEngine::OnHeaderFailed(ucs_status_t status, size_t length) {
  ++metrics_.receive_errors;
  absl::Status why;
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    ++metrics_.receive_refused;
    why = absl::ResourceExhaustedError(absl::StrCat("refused a batch header of ", length,
                                                    " bytes: no valid one exceeds ",
                                                    ucx_wire::kMaxHeaderBytes));
    log::Warning("UCX receive refused an oversized batch header",
                 {{"bytes", static_cast<long long>(length)}});
  } else {
    why = absl::UnavailableError(
        absl::StrCat("receiving a batch header: ", ucs_status_string(status)));
  }
  ready_.push_back({std::move(why), nullptr});
  cv_.SignalAll();
}

absl::Status UcxEngine::AdmitToBudget(const ucx_wire::BatchHeader& h) {
  const size_t total = h.total_bytes;
  auto [it, fresh] = sender_pending_bytes_.try_emplace(h.sender, 0);
  const size_t mine = it->second;
  if (mine + total <= options_.max_receive_bytes_per_sender &&
      pending_bytes_ + total <= options_.max_receive_bytes) {
    it->second += total;
    pending_bytes_ += total;
    return absl::OkStatus();
  }
  if (fresh) sender_pending_bytes_.erase(it);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "refused batch %d from engine %07x (%d buffers, %d bytes): the receive budget holds %d of "
      "%d bytes, %d of that engine's %d",
      h.seq, h.sender, h.sizes.size(), total, pending_bytes_, options_.max_receive_bytes, mine,
      options_.max_receive_bytes_per_sender));
}

void UcxEngine::ReleaseBudget(const ucx_wire::BatchHeader& h) {
  pending_bytes_ -= h.total_bytes;
  auto it = sender_pending_bytes_.find(h.sender);
  if (it == sender_pending_bytes_.end()) return;
  it->second -= h.total_bytes;
  if (it->second == 0) sender_pending_bytes_.erase(it);
}

void UcxEngine::RefuseBatch(ucx_wire::BatchHeader h, uint64_t key, absl::Status why) {
  ++metrics_.receive_refused;
  ++metrics_.receive_errors;
  log::Warning("UCX receive refused a batch",
               {{"sender", absl::StrFormat("%07x", h.sender)}, {"why", why.ToString()}});
  ready_.push_back({why, nullptr});
  cv_.SignalAll();
  auto owned = std::make_unique<Inbound>();
  Inbound* in = owned.get();
  in->engine = this;
  in->key = key;
  in->header = std::move(h);
  in->last_progress = absl::Now();
  in->discarding = true;
  in->reported = true;
  in->status = std::move(why);
  const uint32_t n = static_cast<uint32_t>(in->header.sizes.size());
  in->ctx.assign(n, RequestCtx{in, 0, nullptr});
  in->buffers.resize(n);
  inbound_[key] = std::move(owned);
  for (uint32_t i = 0; i < n; ++i) PostReceive(in, i);
  MaybeRetireInbound(in);  // frees it if every receive completed at once
}

void UcxEngine::OnHeaderBytes(std::span<const uint8_t> bytes) {
  absl::StatusOr<ucx_wire::BatchHeader> h = ucx_wire::DecodeHeader(bytes);
  uint64_t key = h.ok() ? (uint64_t{h->sender} << 32) | h->seq : 0;
  if (h.ok() && inbound_.contains(key)) {
    h = absl::DataLossError(
        absl::StrFormat("duplicate batch %d from engine %07x", h->seq, h->sender));
  }
  if (!h.ok()) {
    ++metrics_.receive_errors;
    ready_.push_back({h.status(), nullptr});
    cv_.SignalAll();
    return;
  }
  if (screen_ && !screen_(h->sender_address)) {
    ++metrics_.peers_refused;
    absl::Status refused = absl::PermissionDeniedError(
        absl::StrFormat("refused batch %d (%d bytes) from %s, which is not a registered peer",
                        h->seq, h->total_bytes, DescribeAddress(h->sender_address)));
    RefuseBatch(*std::move(h), key, std::move(refused));
    return;
  }
  if (absl::Status admitted = AdmitToBudget(*h); !admitted.ok()) {
    RefuseBatch(*std::move(h), key, std::move(admitted));
    return;
  }
  auto owned = std::make_unique<Inbound>();
  Inbound* in = owned.get();
  in->engine = this;
  in->key = key;
  in->header = *std::move(h);
  in->last_progress = absl::Now();
  const uint32_t n = static_cast<uint32_t>(in->header.sizes.size());
  in->ctx.assign(n, RequestCtx{in, 0, nullptr});
  in->crcs.assign(n, 0);
  in->buffers.resize(n);
  in->windowed = n > 0 && FromLocalSender(in->header);
  inbound_[key] = std::move(owned);
  if (in->windowed) {  // `in` may be retired (freed) by PostWindowed: not touched after it
    const uint32_t sender = in->header.sender;
    SenderWindow& w = windows_[sender];
    const bool full = !w.waiting.empty();  // buffers wait only while the window has no room
    for (uint32_t i = 0; i < n; ++i) w.waiting.push_back({in, i});
    in->unposted = static_cast<int>(n);
    PostWindowed(sender);
    size_t deferred = n;
    if (!full) {  // what still waits is this batch's (none if it failed)
      auto it = windows_.find(sender);
      deferred = it == windows_.end() ? 0 : it->second.waiting.size();
    }
    metrics_.receive_buffers_deferred += deferred;
    return;
  }
  for (uint32_t i = 0; i < n && in->status.ok(); ++i) PostReceive(in, i);
  // A receive that failed inside its post may have reported the batch already (FailInbound from
  // OnRecvDone, which could not retire it then): retire it now.
  if (!in->status.ok() && !in->reported) {
    FailInbound(in, in->status);
  } else {
    MaybeRetireInbound(in);
  }
}

bool UcxEngine::PostReceive(Inbound* in, uint32_t index) {
  size_t size = in->header.sizes[index];
  uint8_t* into = discard_;
  if (in->discarding) {
    size = std::min(size, sizeof(discard_));  // UCX truncates the rest and drops it
  } else {
    in->buffers[index] = pool_->Get(size);
    into = in->buffers[index].data.get();
    if (into == nullptr) {
      if (in->status.ok()) {
        in->status = absl::ResourceExhaustedError(
            absl::StrFormat("batch %d from engine %07x, buffer %d: cannot allocate %d bytes",
                            in->header.seq, in->header.sender, index, size));
      }
      return false;
    }
  }
  RequestCtx* c = &in->ctx[index];
  c->index = index;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv = DataCb;
  p.user_data = c;
  uint64_t tag = ucx_wire::MakeTag(ucx_wire::kKindData, in->header.sender, in->header.seq, index);
  c->posting = true;
  c->called_back = false;
  ++in->posting;  // a callback inside the call must not free `in`
  void* r = ucp_tag_recv_nbx(worker_, into, size, tag, ucx_wire::kFullMask, &p);
  --in->posting;
  c->posting = false;
  if (c->called_back) return false;  // OnRecvDone handled it; `r` is released
  if (UCS_PTR_IS_PTR(r)) {
    c->request = r;
    ++in->outstanding;
    return true;
  }
  if (UCS_PTR_STATUS(r) == UCS_OK) {
    OnBufferLanded(in, index);
  } else if (in->status.ok()) {
    in->status = RecvError(*in, index, UCS_PTR_STATUS(r));
  }
  return false;
}

bool UcxEngine::FromLocalSender(const ucx_wire::BatchHeader& h) const {
  if (shm_host_ == 0 || options_.local_receive_window_bytes == 0) return false;
  absl::StatusOr<ucx_wire::ParsedAddress> a = ucx_wire::UnwrapAddress(h.sender_address);
  return a.ok() && a->shm_host == shm_host_;  // the sender's endpoint to us is a local one
}

void UcxEngine::PostWindowed(uint32_t sender) {
  auto it = windows_.find(sender);
  if (hold_windows_ || stop_ || it == windows_.end()) return;
  hold_windows_ = true;
  SenderWindow& w = it->second;
  const absl::Time now = absl::Now();
  while (!w.waiting.empty()) {
    auto [in, index] = w.waiting.front();
    const size_t size = in->header.sizes[index];
    if (w.posted_bytes > 0 && w.posted_bytes + size > options_.local_receive_window_bytes) break;
    w.waiting.pop_front();
    --in->unposted;
    in->last_progress = now;  // its stall clock starts once its bytes may move
    if (PostReceive(in, index)) w.posted_bytes += size;
    if (!in->status.ok() && !in->reported) {
      FailInbound(in, in->status);  // also drops its buffers still waiting
    } else {
      MaybeRetireInbound(in);  // (reported inside the post: retired now)
    }
  }
  hold_windows_ = false;
  DropWindowIfIdle(sender);
}

void UcxEngine::DropWindowIfIdle(uint32_t sender) {
  auto it = windows_.find(sender);
  if (hold_windows_ || it == windows_.end()) return;
  if (it->second.waiting.empty() && it->second.posted_bytes == 0) windows_.erase(it);
}

void UcxEngine::FailWaitingBatches(uint32_t sender, std::string_view why) {
  auto it = windows_.find(sender);
  if (it == windows_.end()) return;
  std::vector<Inbound*> batches;  // a batch's waiting buffers are consecutive
  for (const BufferRef& b : it->second.waiting) {
    if (batches.empty() || batches.back() != b.in) batches.push_back(b.in);
  }
  for (Inbound* in : batches) {  // each drops its waiting buffers
    FailInbound(in, absl::DeadlineExceededError(absl::StrFormat("batch %d from engine %07x: %s",
                                                                in->header.seq, sender, why)));
  }
}

void UcxEngine::OnRecvDone(Inbound* in, RequestCtx* c, ucs_status_t status) {
  // A windowed buffer makes room for its sender's next ones, posted once `in` is handled (it may
  // be retired, and freed, below).
  const bool windowed = in->windowed;
  const uint32_t sender = in->header.sender;
  // (A callback inside PostReceive comes before its bytes were counted as posted.)
  if (windowed && !c->posting) windows_[sender].posted_bytes -= in->header.sizes[c->index];
  absl::Cleanup post_next = [&] {
    mu_.AssertHeld();  // runs as OnRecvDone returns, with mu_ held
    if (windowed) PostWindowed(sender);
  };
  c->request = nullptr;
  if (c->posting) {
    c->called_back = true;  // inside PostReceive: never counted as outstanding
  } else {
    --in->outstanding;
  }
  if (status == UCS_OK) {
    OnBufferLanded(in, c->index);
    in->last_progress = absl::Now();
  } else if (in->status.ok()) {
    in->status = RecvError(*in, c->index, status);
  }
  if (!in->status.ok() && !in->reported) {
    FailInbound(in, in->status);  // retires `in` if nothing is outstanding
    return;
  }
  MaybeRetireInbound(in);
}

void UcxEngine::OnBufferLanded(Inbound* in, uint32_t index) {
  if (in->discarding) return;
  metrics_.bytes_received += in->header.sizes[index];
  if (!in->header.has_crc) return;
  ++in->crc_pending;
  landed_.push_back({in, index});
  cv_.SignalAll();
}

// Pops one landed buffer and checksums it with mu_ released. The Inbound and its buffers stay
// alive meanwhile: they are released only by MaybeRetireInbound, which skips an Inbound with
// crc_pending > 0, or by the destructor, which no Receive() may overlap. A landed buffer is no
// longer written (its receive completed), so reading it unlocked is safe.
void UcxEngine::ChecksumOneLanded() {
  BufferRef item = landed_.front();
  landed_.pop_front();
  Inbound* in = item.in;
  if (!in->reported) {  // a failed batch is not checked
    const uint8_t* data = in->buffers[item.index].data.get();
    const size_t size = in->header.sizes[item.index];
    mu_.Unlock();
    const uint32_t crc = kvpage::Crc32cExtend(0, data, size);
    mu_.Lock();
    in->crcs[item.index] = crc;
  }
  --in->crc_pending;
  MaybeRetireInbound(in);
}

// Reports `in` as failed at once; its still-posted receives are cancelled (those UCX has
// already matched finish or fail on their own), and it is freed when none is outstanding.
void UcxEngine::FailInbound(Inbound* in, absl::Status why) {
  if (in->reported) return;
  in->reported = true;
  if (in->unposted > 0) {  // its buffers waiting in the sender's window are never posted now
    auto w = windows_.find(in->header.sender);
    std::erase_if(w->second.waiting, [in](const BufferRef& b) { return b.in == in; });
    in->unposted = 0;
    DropWindowIfIdle(in->header.sender);
  }
  if (in->status.ok()) in->status = why;
  ++metrics_.receive_errors;
  ready_.push_back({std::move(why), nullptr});
  cv_.SignalAll();
  CancelPosted(in);
}

void UcxEngine::CancelPosted(Inbound* in) {
  std::vector<void*> posted;
  for (auto& c : in->ctx) {
    if (c.request != nullptr) posted.push_back(c.request);
  }
  if (posted.empty()) {
    MaybeRetireInbound(in);
    return;
  }
  // NOTE: a cancel may complete synchronously and retire (free) `in`; touch only `posted`.
  for (void* r : posted) ucp_request_cancel(worker_, r);
}

void UcxEngine::MaybeRetireInbound(Inbound* in) {
  if (in->outstanding > 0 || in->crc_pending > 0 || in->unposted > 0 || in->posting > 0) return;
  auto node = inbound_.extract(in->key);
  if (node.empty()) return;
  std::unique_ptr<Inbound> owned = std::move(node.mapped());
  if (!in->reported) {
    in->reported = true;
    ready_.push_back({absl::OkStatus(), std::move(owned)});
    cv_.SignalAll();
    return;
  }
  if (!in->discarding) ReleaseBudget(in->header);
  for (auto& b : in->buffers) pool_->Put(std::move(b));
}

absl::StatusOr<ReceivedBatch> UcxEngine::Receive(absl::Time deadline) {
  receivers_.fetch_add(1, std::memory_order_relaxed);
  absl::Cleanup done = [this] { receivers_.fetch_sub(1, std::memory_order_relaxed); };
  ReadyItem item;
  {
    absl::MutexLock l(&mu_);
    auto has_work = [this] {
      mu_.AssertHeld();  // DriveUntil runs its predicate with mu_ held
      return !ready_.empty() || !landed_.empty();
    };
    for (;;) {
      if (!DriveUntil(deadline, has_work)) {
        return absl::DeadlineExceededError("no batch arrived before the deadline");
      }
      if (!ready_.empty()) break;
      ChecksumOneLanded();
    }
    item = std::move(ready_.front());
    ready_.pop_front();
    if (item.batch != nullptr) ReleaseBudget(item.batch->header);  // the caller owns it now
  }
  if (!item.status.ok()) return item.status;
  Inbound& in = *item.batch;
  uint32_t crc = 0;
  std::vector<std::span<const uint8_t>> spans;
  for (size_t i = 0; i < in.buffers.size(); ++i) {
    spans.emplace_back(in.buffers[i].data.get(), in.header.sizes[i]);
    if (in.header.has_crc) crc = kvpage::Crc32cCombine(crc, in.crcs[i], in.header.sizes[i]);
  }
  auto storage = std::make_unique<PoolStorage>(pool_, std::move(in.buffers));
  absl::MutexLock l(&mu_);
  if (in.header.has_crc && crc != in.header.crc) {
    ++metrics_.checksum_errors;
    ++metrics_.receive_errors;
    return absl::DataLossError(absl::StrFormat(
        "batch %d from engine %07x (%d buffers, %d bytes): CRC32C %08x, header says %08x",
        in.header.seq, in.header.sender, spans.size(), in.header.total_bytes, crc, in.header.crc));
  }
  ++metrics_.batches_received;
  return ReceivedBatch(in.header.sender_address, std::move(spans), std::move(storage),
                       in.header.has_crc);
}

}  // namespace glimpse::transport::ucx_internal

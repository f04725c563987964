// UcxEngine send side: Submit (back-pressure, header + one tag send per buffer), completion,
// Wait / GetStatus / Cancel and transfer deadlines.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/kvpage/crc32c.h"
#include "core/transport/ucx/ucx_engine.h"

namespace glimpse::transport::ucx_internal {
namespace {

void SendCb(void* request, ucs_status_t status, void* user_data) {
  auto* c = static_cast<RequestCtx*>(user_data);
  auto* o = static_cast<Outbound*>(c->owner);
  o->engine->AssertInUcxCallback();
  o->engine->OnSendDone(o, c, status);
  ucp_request_free(request);
}

}  // namespace

absl::StatusOr<TransferId> UcxEngine::Submit(PeerId peer,
                                             std::span<const std::span<const uint8_t>> buffers,
                                             const SubmitOptions& options) {
  if (buffers.empty() || buffers.size() > kMaxBuffersPerBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", buffers.size(), " buffers; allowed 1..", kMaxBuffersPerBatch));
  }
  auto o = std::make_unique<Outbound>();
  o->engine = this;
  o->peer = peer;
  uint32_t crc = 0;
  for (auto b : buffers) {  // the expensive part, outside the lock
    if (options.checksum) crc = kvpage::Crc32cExtend(crc, b.data(), b.size());
    o->sizes.push_back(b.size());
    o->bytes += b.size();
  }
  if (o->bytes > options_.max_inflight_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", o->bytes,
                                                   " bytes can never fit max_inflight_bytes ",
                                                   options_.max_inflight_bytes));
  }
  o->deadline = options.deadline == absl::InfiniteFuture()
                    ? absl::Now() + options_.default_transfer_timeout
                    : options.deadline;
  absl::ReleasableMutexLock l(&mu_);
  auto fits = [&] {
    mu_.AssertHeld();  // called only here and by WaitUntil, both with mu_ held
    return metrics_.inflight_bytes + o->bytes <= options_.max_inflight_bytes;
  };
  if (!fits()) {
    if (!options.block) {
      ++metrics_.submits_rejected;
      return absl::ResourceExhaustedError(
          absl::StrCat(metrics_.inflight_bytes, " bytes in flight + ", o->bytes,
                       " > max_inflight_bytes ", options_.max_inflight_bytes));
    }
    if (!WaitUntil(cv_, mu_, o->deadline, fits)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no in-flight space for ", o->bytes, " bytes before the deadline"));
    }
  }
  auto pit = peers_.find(peer);
  if (pit == peers_.end()) return absl::NotFoundError(absl::StrCat("peer ", peer));
  EndpointState* e = pit->second.get();
  if (!e->error.ok() || e->ep == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("peer ", peer, " is unusable (connect again): ", e->error.message()));
  }
  ucx_wire::BatchHeader h;
  h.sender = engine_id_;
  h.seq = next_seq_++ & ucx_wire::kSeqMask;
  h.has_crc = options.checksum;
  h.crc = test_corrupt_checksums_ ? crc ^ 0x1u : crc;
  h.total_bytes = o->bytes;
  h.sizes = o->sizes;
  h.sender_address = address_;
  o->header = ucx_wire::EncodeHeader(h);
  o->id = next_transfer_++;
  metrics_.inflight_bytes += o->bytes;
  metrics_.peak_inflight_bytes = std::max(metrics_.peak_inflight_bytes, metrics_.inflight_bytes);
  ++metrics_.transfers_submitted;
  Outbound* raw = o.get();
  transfers_[o->id] = std::move(o);
  TransferId id = raw->id;
  raw->status = PostSends(raw, e, h.seq, buffers);
  if (raw->outstanding == 0) FinishOutbound(raw);
  l.Release();
  Wake();
  return id;
}

absl::Status UcxEngine::PostSends(Outbound* o, EndpointState* e, uint32_t seq,
                                  std::span<const std::span<const uint8_t>> buffers) {
  const size_t n = buffers.size();
  o->ctx.assign(n + 1, RequestCtx{o, 0, nullptr});
  auto post = [&](uint32_t index, const void* data, size_t size, uint64_t tag) -> absl::Status {
    mu_.AssertHeld();  // called only below, within PostSends
    RequestCtx* c = &o->ctx[index == kHeaderIndex ? n : index];
    c->index = index;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = SendCb;
    p.user_data = c;
    if (index != kHeaderIndex) {
      if (ucp_mem_h memh = FindMemh(static_cast<const uint8_t*>(data), size)) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = memh;
      }
    }
    void* r = ucp_tag_send_nbx(e->ep, data, size, tag, &p);
    if (UCS_PTR_IS_ERR(r)) {
      return absl::UnavailableError(absl::StrFormat("tag send of %d bytes to engine %07x: %s", size,
                                                    e->remote_id,
                                                    ucs_status_string(UCS_PTR_STATUS(r))));
    }
    if (r == nullptr) {
      if (index != kHeaderIndex) metrics_.bytes_sent += size;
      return absl::OkStatus();
    }
    c->request = r;
    ++o->outstanding;
    return absl::OkStatus();
  };
  absl::Status s = post(kHeaderIndex, o->header.data(), o->header.size(),
                        ucx_wire::MakeTag(ucx_wire::kKindHeader, engine_id_, seq, 0));
  for (uint32_t i = 0; s.ok() && i < n; ++i) {
    s = post(i, buffers[i].data(), buffers[i].size(),
             ucx_wire::MakeTag(ucx_wire::kKindData, engine_id_, seq, i));
  }
  if (!s.ok()) {
    // The batch is incomplete: withdraw what was posted and retire the endpoint (flush close,
    // see CloseMode); the receiver fails the batch by its stall timeout.
    o->status = s;
    o->aborted_at = absl::Now();
    CancelSends(o);
    TearDown(e, absl::AbortedError(absl::StrCat("transfer ", o->id, " failed: ", s.message())),
             CloseMode::kFlush);
  }
  return s;
}

void UcxEngine::OnSendDone(Outbound* o, RequestCtx* c, ucs_status_t status) {
  c->request = nullptr;
  --o->outstanding;
  if (status == UCS_OK) {
    if (c->index != kHeaderIndex) metrics_.bytes_sent += o->sizes[c->index];
  } else if (o->status.ok()) {
    auto pit = peers_.find(o->peer);
    absl::Status peer_error = pit == peers_.end() ? absl::OkStatus() : pit->second->error;
    o->status = !peer_error.ok()
                    ? peer_error
                    : absl::UnavailableError(absl::StrCat("send of transfer ", o->id,
                                                          " failed: ", ucs_status_string(status)));
  }
  if (o->outstanding > 0) return;
  FinishOutbound(o);
  retiring_.erase(o->id);  // frees `o` if it was already waited for
}

void UcxEngine::FinishOutbound(Outbound* o) {
  if (o->done) return;
  o->done = true;
  metrics_.inflight_bytes -= o->bytes;
  ++(o->status.ok() ? metrics_.transfers_completed : metrics_.transfers_failed);
  cv_.SignalAll();
}

absl::StatusOr<TransferStatus> UcxEngine::GetStatus(TransferId id) {
  absl::MutexLock l(&mu_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return absl::NotFoundError(absl::StrCat("transfer ", id));
  const Outbound& o = *it->second;
  return TransferStatus{o.done, o.done ? o.status : absl::OkStatus(), o.bytes};
}

absl::Status UcxEngine::Wait(TransferId id, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return absl::NotFoundError(absl::StrCat("transfer ", id));
  Outbound* o = it->second.get();
  if (!DriveUntil(deadline, [o] { return o->done; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("transfer ", id, " still in flight at the wait deadline"));
  }
  absl::Status s = o->status;
  if (o->outstanding > 0) {  // reported early (kAbortGrace): UCX still holds its requests
    retiring_[id] = std::move(it->second);
  }
  transfers_.erase(id);
  return s;
}

absl::Status UcxEngine::Cancel(TransferId id) {
  absl::ReleasableMutexLock l(&mu_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return absl::NotFoundError(absl::StrCat("transfer ", id));
  Outbound* o = it->second.get();
  if (o->done) return absl::OkStatus();
  AbortLocked(o, absl::CancelledError(absl::StrCat("transfer ", id, " cancelled")));
  l.Release();
  Wake();
  return absl::OkStatus();
}

// Ends a transfer early: its status is fixed to `why` at once, its posted sends are withdrawn
// (ucp_request_cancel; UCX calls each back, completed or cancelled, from the progress thread) and
// its endpoint is retired with a flush close, never a force close (see CloseMode). The transfer
// is reported done when UCX has released every send, so the caller's buffers are free then;
// other transfers on the endpoint finish normally, and the peer must be connected again.
void UcxEngine::AbortLocked(Outbound* o, absl::Status why) {
  if (o->done || o->aborted_at != absl::InfiniteFuture()) return;
  if (o->status.ok()) o->status = why;
  o->aborted_at = absl::Now();
  CancelSends(o);
  auto pit = peers_.find(o->peer);
  if (pit != peers_.end()) {
    EndpointState* e = pit->second.get();
    TearDown(e,
             absl::AbortedError(
                 absl::StrCat("endpoint retired to end transfer ", o->id, ": ", why.message())),
             e->failed ? CloseMode::kForce : CloseMode::kFlush);
  }
  if (o->outstanding == 0) FinishOutbound(o);
}

void UcxEngine::CancelSends(Outbound* o) {
  std::vector<void*> posted;  // NOTE: a cancel may call back at once; touch only `posted`
  for (auto& c : o->ctx) {
    if (c.request != nullptr) posted.push_back(c.request);
  }
  for (void* r : posted) ucp_request_cancel(worker_, r);
}

void UcxEngine::CheckDeadlines(absl::Time now) {
  for (auto& [id, o] : transfers_) {
    if (o->done) continue;
    if (o->aborted_at == absl::InfiniteFuture() && now > o->deadline) {
      AbortLocked(o.get(), absl::DeadlineExceededError(absl::StrCat(
                               "transfer ", id, " (", o->bytes, " bytes) missed its deadline")));
    } else if (now - o->aborted_at > kAbortGrace) {
      // NOTE: UCX neither completed nor cancelled these sends (a rendezvous the receiver holds
      // but does not serve). Waiting longer would turn Cancel / a deadline into a hang, a force
      // close risks UCX's wireup assertion; the transfer is reported done and its Outbound kept
      // until UCX calls back. UCX may still read the caller's buffers until then: the receiver's
      // CRC32C rejects whatever it reads.
      log::Warning("aborted UCX transfer still held by UCX; reported done",
                   {{"transfer", static_cast<long long>(id)},
                    {"outstanding_sends", static_cast<long long>(o->outstanding)}});
      FinishOutbound(o.get());
    }
  }
  std::vector<Inbound*> stalled, discards;
  for (auto& [key, in] : inbound_) {
    // A batch whose buffers all landed only waits for a Receive() caller to checksum it.
    if (in->outstanding == 0 || now - in->last_progress <= options_.receive_stall_timeout) continue;
    if (in->discarding) {
      discards.push_back(in.get());  // reported when refused: just stop waiting for its bytes
    } else if (!in->reported) {
      stalled.push_back(in.get());
    }
  }
  for (Inbound* in : discards) {
    in->last_progress = absl::InfiniteFuture();  // cancelled once; it goes when UCX calls back
    CancelPosted(in);                            // may free `in`
  }
  // A windowed sender's batches queued behind a stalled one fail with it: posted in turn, each
  // would stall on its own, one timeout per queued batch of a dead sender. Held meanwhile, so that
  // no cancel's callback posts them first.
  std::vector<uint32_t> stalled_senders;
  hold_windows_ = true;
  for (Inbound* in : stalled) {
    if (in->windowed) stalled_senders.push_back(in->header.sender);
    FailInbound(in, absl::DeadlineExceededError(absl::StrFormat(
                        "batch %d from engine %07x: no data for %s (%d of %d buffers pending)",
                        in->header.seq, in->header.sender,
                        absl::FormatDuration(options_.receive_stall_timeout), in->outstanding,
                        in->header.sizes.size())));
  }
  for (uint32_t sender : stalled_senders) {
    FailWaitingBatches(sender, "not started; an earlier batch from that engine stalled");
  }
  hold_windows_ = false;
  for (uint32_t sender : stalled_senders) DropWindowIfIdle(sender);
}

}  // namespace glimpse::transport::ucx_internal

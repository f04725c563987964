#include "core/transport/loopback/loopback_transport.h"

#include <atomic>
#include <deque>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/kvpage/crc32c.h"

namespace glimpse::transport {
namespace {

constexpr std::string_view kPrefix = "loopback:";

struct Inbound {
  uint64_t from = 0;
  std::string sender_address;
  std::optional<uint32_t> crc;  // none: SubmitOptions::checksum was off
  std::vector<std::vector<uint8_t>> buffers;
};

// Receive queue of one engine; shared with the fabric so senders can reach it.
struct Mailbox {
  absl::Mutex mu;
  absl::CondVar cv;  // signalled when a batch is queued
  std::deque<Inbound> queue ABSL_GUARDED_BY(mu);
};

class VectorStorage : public ReceivedBatch::Storage {
 public:
  explicit VectorStorage(std::vector<std::vector<uint8_t>> b) : buffers(std::move(b)) {}
  std::vector<std::vector<uint8_t>> buffers;
};

class PlainRegion : public MemoryRegion {
 public:
  PlainRegion(const void* d, size_t n) : data_(static_cast<const uint8_t*>(d)), size_(n) {}
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

class LoopbackFabric {
 public:
  uint64_t Add(std::shared_ptr<Mailbox> box) {
    absl::MutexLock l(&mu_);
    boxes_[next_] = box;
    return next_++;
  }
  void Remove(uint64_t id) {
    absl::MutexLock l(&mu_);
    boxes_.erase(id);
  }
  std::shared_ptr<Mailbox> Find(uint64_t id) {
    absl::MutexLock l(&mu_);
    auto it = boxes_.find(id);
    return it == boxes_.end() ? nullptr : it->second;
  }

 private:
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::shared_ptr<Mailbox>> boxes_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<LoopbackFabric> NewLoopbackFabric() { return std::make_shared<LoopbackFabric>(); }

namespace {

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, const Options& options)
      : fabric_(std::move(fabric)), options_(options), box_(std::make_shared<Mailbox>()) {
    id_ = fabric_->Add(box_);
  }
  ~LoopbackTransport() override { fabric_->Remove(id_); }

  std::string LocalAddress() const override { return absl::StrCat(std::string(kPrefix), id_); }

  absl::StatusOr<PeerId> Connect(std::string_view address) override {
    uint64_t id = 0;
    if (!address.starts_with(kPrefix) ||
        !absl::SimpleAtoi(std::string(address.substr(kPrefix.size())), &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a loopback address: '", std::string(address.substr(0, 64)), "'"));
    }
    if (fabric_->Find(id) == nullptr) {
      return absl::UnavailableError(absl::StrCat("loopback engine ", id, " does not exist"));
    }
    return id;
  }
  absl::Status Disconnect(PeerId) override { return absl::OkStatus(); }
  void TEST_CorruptChecksums(bool on) { test_corrupt_checksums_ = on; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const void* data,
                                                               size_t size) override {
    return std::make_unique<PlainRegion>(data, size);
  }

  absl::StatusOr<TransferId> Submit(PeerId peer, std::span<const std::span<const uint8_t>> buffers,
                                    const SubmitOptions& options) override {
    if (buffers.empty() || buffers.size() > kMaxBuffersPerBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", buffers.size(), " buffers; allowed 1..", kMaxBuffersPerBatch));
    }
    Inbound in;
    in.from = id_;
    in.sender_address = LocalAddress();
    uint64_t bytes = 0;
    uint32_t crc = 0;
    for (auto b : buffers) {
      if (options.checksum) crc = kvpage::Crc32cExtend(crc, b.data(), b.size());
      in.buffers.emplace_back(b.begin(), b.end());
      bytes += b.size();
    }
    if (bytes > options_.max_inflight_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("batch of ", bytes, " bytes exceeds ",
                                                     "max_inflight_bytes ",
                                                     options_.max_inflight_bytes));
    }
    if (options.checksum) in.crc = test_corrupt_checksums_ ? crc ^ 1 : crc;
    TransferStatus st{true, absl::OkStatus(), bytes};
    std::shared_ptr<Mailbox> box = fabric_->Find(peer);
    if (box == nullptr) {
      st.status = absl::UnavailableError(absl::StrCat("loopback peer ", peer, " is gone"));
    } else {
      absl::MutexLock l(&box->mu);
      box->queue.push_back(std::move(in));
      box->cv.SignalAll();
    }
    absl::MutexLock l(&mu_);
    ++metrics_.transfers_submitted;
    (st.status.ok() ? metrics_.transfers_completed : metrics_.transfers_failed)++;
    if (st.status.ok()) metrics_.bytes_sent += bytes;
    metrics_.peak_inflight_bytes = std::max<uint64_t>(metrics_.peak_inflight_bytes, bytes);
    transfers_[next_id_] = st;
    return next_id_++;
  }

  absl::StatusOr<TransferStatus> GetStatus(TransferId id) override {
    absl::MutexLock l(&mu_);
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return absl::NotFoundError(absl::StrCat("transfer ", id));
    return it->second;
  }
  absl::Status Wait(TransferId id, absl::Time) override {
    absl::MutexLock l(&mu_);
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return absl::NotFoundError(absl::StrCat("transfer ", id));
    absl::Status s = it->second.status;
    transfers_.erase(it);
    return s;
  }
  absl::Status Cancel(TransferId id) override {
    absl::MutexLock l(&mu_);
    if (!transfers_.contains(id)) return absl::NotFoundError(absl::StrCat("transfer ", id));
    return absl::OkStatus();  // already done
  }

  absl::StatusOr<ReceivedBatch> Receive(absl::Time deadline) override;

  // A loopback batch is whole in memory when it is queued: the screen runs when it is taken.
  void ScreenSenders(SenderScreen screen) override {
    absl::MutexLock l(&mu_);
    screen_ = std::move(screen);
  }

  Metrics GetMetrics() const override {
    absl::MutexLock l(&mu_);
    return metrics_;
  }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  Options options_;
  std::shared_ptr<Mailbox> box_;
  uint64_t id_ = 0;
  mutable absl::Mutex mu_;
  Metrics metrics_ ABSL_GUARDED_BY(mu_);
  SenderScreen screen_ ABSL_GUARDED_BY(mu_);
  TransferId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<TransferId, TransferStatus> transfers_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> test_corrupt_checksums_{false};  // TEST_CorruptChecksums
};

absl::StatusOr<ReceivedBatch> LoopbackTransport::Receive(absl::Time deadline) {
  Inbound in;
  {
    absl::MutexLock l(&box_->mu);
    while (box_->queue.empty()) {
      if (box_->cv.WaitWithDeadline(&box_->mu, deadline) && box_->queue.empty()) {
        return absl::DeadlineExceededError("no batch arrived before the deadline");
      }
    }
    in = std::move(box_->queue.front());
    box_->queue.pop_front();
  }
  uint32_t crc = 0;
  std::vector<std::span<const uint8_t>> spans;
  for (const auto& b : in.buffers) {
    if (in.crc.has_value()) crc = kvpage::Crc32cExtend(crc, b.data(), b.size());
    spans.emplace_back(b.data(), b.size());
  }
  absl::MutexLock l(&mu_);
  if (screen_ && !screen_(in.sender_address)) {
    ++metrics_.peers_refused;
    ++metrics_.receive_errors;
    return absl::PermissionDeniedError(absl::StrCat("refused a batch from ", in.sender_address,
                                                    ", which is not a registered peer"));
  }
  if (in.crc.has_value() && crc != *in.crc) {
    ++metrics_.checksum_errors;
    ++metrics_.receive_errors;
    return absl::DataLossError(
        absl::StrCat("batch from loopback engine ", in.from, ": CRC32C ", crc, " != ", *in.crc));
  }
  ++metrics_.batches_received;
  for (auto s : spans) metrics_.bytes_received += s.size();
  const bool checksummed = in.crc.has_value();
  return ReceivedBatch(std::move(in.sender_address), std::move(spans),
                       std::make_unique<VectorStorage>(std::move(in.buffers)), checksummed);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateLoopbackTransport(
    std::shared_ptr<LoopbackFabric> fabric, const Options& options) {
  if (fabric == nullptr) return absl::InvalidArgumentError("null LoopbackFabric");
  return std::make_unique<LoopbackTransport>(std::move(fabric), options);
}

void TEST_CorruptLoopbackChecksums(Transport& loopback, bool on) {
  static_cast<LoopbackTransport&>(loopback).TEST_CorruptChecksums(on);
}

}  // namespace glimpse::transport

#include "core/transport/peer_allowlist.h"

#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/transport/ucx/ucx_wire.h"

namespace glimpse::transport {
namespace {

class RestrictedTransport final : public Transport {
 public:
  RestrictedTransport(std::unique_ptr<Transport> inner, std::shared_ptr<PeerAllowlist> allowlist)
      : inner_(std::move(inner)), allowlist_(std::move(allowlist)) {}

  std::string LocalAddress() const override { return inner_->LocalAddress(); }

  absl::StatusOr<PeerId> Connect(std::string_view peer_address) override {
    if (!allowlist_->Allows(peer_address)) {
      refused_.fetch_add(1);
      return absl::PermissionDeniedError(absl::StrCat(
          DescribeAddress(peer_address), " is not a registered peer; refusing to connect"));
    }
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
    absl::StatusOr<ReceivedBatch> batch = inner_->Receive(deadline);
    if (!batch.ok() || allowlist_->Allows(batch->sender_address())) return batch;
    refused_.fetch_add(1);
    return absl::PermissionDeniedError(
        absl::StrCat("dropped a batch of ", batch->total_bytes(), " bytes from ",
                     DescribeAddress(batch->sender_address()), ", which is not a registered peer"));
  }

  Metrics GetMetrics() const override {
    Metrics m = inner_->GetMetrics();
    m.peers_refused += refused_.load();
    return m;
  }

 private:
  const std::unique_ptr<Transport> inner_;
  const std::shared_ptr<PeerAllowlist> allowlist_;
  std::atomic<uint64_t> refused_{0};
};

bool Printable(std::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Transport> RestrictToPeers(std::unique_ptr<Transport> inner,
                                           std::shared_ptr<PeerAllowlist> allowlist) {
  if (allowlist == nullptr) return inner;
  return std::make_unique<RestrictedTransport>(std::move(inner), std::move(allowlist));
}

std::string DescribeAddress(std::string_view address) {
  if (absl::StatusOr<ucx_wire::ParsedAddress> ucx = ucx_wire::UnwrapAddress(address); ucx.ok()) {
    return absl::StrFormat("UCX engine %07x", ucx->engine_id);
  }
  if (address.empty()) return "no address";
  if (address.size() <= 64 && Printable(address)) {
    return std::string(address);
  }
  return absl::StrCat("a ", address.size(), "-byte address");
}

}  // namespace glimpse::transport

#include "core/transport/peer_allowlist.h"

#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/transport/ucx/ucx_wire.h"

namespace glimpse::transport {
namespace {

class RestrictedTransport final : public ForwardingTransport {
 public:
  RestrictedTransport(std::unique_ptr<Transport> inner, std::shared_ptr<PeerAllowlist> allowlist)
      : ForwardingTransport(std::move(inner)), allowlist_(std::move(allowlist)) {
    ScreenSenders({});
  }

  // The allowlist's screen, and `screen` where it is set.
  void ScreenSenders(SenderScreen screen) override {
    ForwardingTransport::ScreenSenders(
        [allowlist = allowlist_, screen = std::move(screen)](std::string_view sender) {
          return allowlist->Peek(sender) != PeerVerdict::kRefused && (!screen || screen(sender));
        });
  }

  absl::StatusOr<PeerId> Connect(std::string_view peer_address) override {
    if (!allowlist_->Allows(peer_address)) {
      refused_.fetch_add(1);
      return absl::PermissionDeniedError(absl::StrCat(
          DescribeAddress(peer_address), " is not a registered peer; refusing to connect"));
    }
    return ForwardingTransport::Connect(peer_address);
  }

  absl::StatusOr<ReceivedBatch> Receive(absl::Time deadline) override {
    absl::StatusOr<ReceivedBatch> batch = ForwardingTransport::Receive(deadline);
    if (!batch.ok() || allowlist_->Allows(batch->sender_address())) return batch;
    refused_.fetch_add(1);
    return absl::PermissionDeniedError(
        absl::StrCat("dropped a batch of ", batch->total_bytes(), " bytes from ",
                     DescribeAddress(batch->sender_address()), ", which is not a registered peer"));
  }

  Metrics GetMetrics() const override {
    Metrics m = ForwardingTransport::GetMetrics();
    m.peers_refused += refused_.load();
    return m;
  }

 private:
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

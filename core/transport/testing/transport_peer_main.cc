// glimpse_transport_peer: the other process of the two-process UCX transport tests.
//   send   HEXADDR BATCHES BUFS SIZE SEED  — ships BATCHES batches of BUFS buffers (SIZE bytes,
//                                            0 = MixedSize) with FillPattern contents; "DONE"
//   stream HEXADDR BUFS SIZE SECONDS        — ships batches back to back for SECONDS
//   recv   SECONDS                          — prints "ADDR <hex>", receives for SECONDS
// Exit code 0 on success, 1 with "ERROR <status>" on stdout otherwise. UCX_TLS comes from the
// environment the parent set. Every wait is bounded.
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "core/transport/testing/peer_util.h"
#include "core/transport/ucx/ucx_transport.h"

namespace gt = glimpse::transport;

namespace {

int Fail(const absl::Status& s) {
  std::printf("ERROR %s\n", s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

struct Batch {
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::span<const uint8_t>> spans;
};

Batch MakeBatch(uint64_t seed, uint64_t b, size_t bufs, size_t size) {
  Batch out;
  for (size_t i = 0; i < bufs; ++i) {
    out.data.emplace_back(size == 0 ? gt::testing::MixedSize(i + b) : size);
    gt::testing::FillPattern(out.data.back(), seed, b, i);
  }
  for (auto& d : out.data) out.spans.emplace_back(d.data(), d.size());
  return out;
}

int Send(gt::Transport& t, const std::string& addr, int batches, size_t bufs, size_t size,
         uint64_t seed, absl::Duration run_for) {
  absl::StatusOr<gt::PeerId> peer = t.Connect(addr);
  if (!peer.ok()) return Fail(peer.status());
  const bool stream = run_for > absl::ZeroDuration();
  const absl::Time end = absl::Now() + run_for;
  std::deque<std::pair<gt::TransferId, int>> inflight;  // (id, slot)
  std::vector<Batch> slots;
  for (int s = 0; s < 2; ++s) slots.push_back(MakeBatch(seed, s, bufs, size));
  for (int b = 0; stream ? absl::Now() < end : b < batches; ++b) {
    if (inflight.size() == 2) {
      absl::Status st = t.Wait(inflight.front().first, absl::Now() + absl::Seconds(30));
      if (!st.ok()) return Fail(st);
      inflight.pop_front();
    }
    if (!stream) slots[b % 2] = MakeBatch(seed, b, bufs, size);
    absl::StatusOr<gt::TransferId> id = t.Submit(*peer, slots[b % 2].spans);
    if (!id.ok()) return Fail(id.status());
    inflight.emplace_back(*id, b % 2);
  }
  for (auto& [id, slot] : inflight) {
    absl::Status st = t.Wait(id, absl::Now() + absl::Seconds(30));
    if (!st.ok()) return Fail(st);
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  gt::UcxOptions options;
  options.receive_stall_timeout = absl::Seconds(3);
  const char* allow = std::getenv("GLIMPSE_TRANSPORT_ALLOW_NO_PEER_FAILURE_DETECTION");
  options.allow_no_peer_failure_detection = allow != nullptr && allow[0] == '1';
  absl::StatusOr<std::unique_ptr<gt::Transport>> t = gt::CreateUcxTransport(options);
  if (!t.ok()) return Fail(t.status());
  if (mode == "send" && argc == 7) {
    return Send(**t, gt::testing::FromHex(argv[2]), std::atoi(argv[3]), std::atol(argv[4]),
                std::atol(argv[5]), std::strtoull(argv[6], nullptr, 10), absl::ZeroDuration());
  }
  if (mode == "stream" && argc == 6) {
    return Send(**t, gt::testing::FromHex(argv[2]), 0, std::atol(argv[3]), std::atol(argv[4]), 1,
                absl::Seconds(std::atoi(argv[5])));
  }
  if (mode == "recv" && argc == 3) {
    std::printf("ADDR %s\n", gt::testing::ToHex((*t)->LocalAddress()).c_str());
    std::fflush(stdout);
    absl::Time end = absl::Now() + absl::Seconds(std::atoi(argv[2]));
    while (absl::Now() < end) (void)(*t)->Receive(std::min(end, absl::Now() + absl::Seconds(1)));
    return 0;
  }
  return 2;
}

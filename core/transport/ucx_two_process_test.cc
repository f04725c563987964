// UcxTransport between two processes: this test process and glimpse_transport_peer (fork +
// exec, so the child starts UCX fresh), over shm and over tcp, including a peer SIGKILLed
// mid-stream on either side. Every wait is bounded; Child's destructor kills and reaps.
#include <signal.h>

#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/transport/testing/peer_util.h"
#include "core/transport/ucx/ucx_transport.h"
#include "core/transport/ucx_test_env.h"
#include "gtest/gtest.h"

namespace glimpse::transport {
namespace {

using testing::Child;
using testing::ToHex;

constexpr char kPeer[] = GLIMPSE_TRANSPORT_PEER;

using UcxTwoProcess = UcxTlsTest;

TEST_P(UcxTwoProcess, ChildSendsBatchesOfMixedSizes) {
  auto rx = CreateUcxTransport(TestOptions(GetParam()));
  ASSERT_TRUE(rx.ok()) << rx.status();
  const std::pair<int, int> shapes[] = {{1, 1}, {64, 65536}, {16, 4 << 20}, {64, 0}, {3, 4097}};
  for (auto [bufs, size] : shapes) {
    const int batches = 5;
    auto child = Child::Start({kPeer, "send", ToHex((*rx)->LocalAddress()), absl::StrCat(batches),
                               absl::StrCat(bufs), absl::StrCat(size), "11"});
    ASSERT_TRUE(child.ok()) << child.status();
    for (int b = 0; b < batches; ++b) {
      auto got = (*rx)->Receive(absl::Now() + absl::Seconds(20));
      ASSERT_TRUE(got.ok()) << got.status() << " batch " << b << " shape " << bufs << "x" << size;
      ASSERT_EQ(got->buffers().size(), static_cast<size_t>(bufs));
      for (int i = 0; i < bufs; ++i) {
        size_t want = size == 0 ? testing::MixedSize(i + b) : size;
        ASSERT_EQ(got->buffers()[i].size(), want);
        ASSERT_TRUE(testing::CheckPattern(got->buffers()[i], 11, b, i)) << b << "/" << i;
      }
    }
    auto line = child->ReadLine(absl::Now() + absl::Seconds(20), {"DONE", "ERROR"});
    EXPECT_TRUE(line.ok() && *line == "DONE") << (line.ok() ? *line : line.status().ToString());
    auto rc = child->WaitExit(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(rc.ok()) << rc.status();
    EXPECT_EQ(*rc, 0);
  }
}

TEST_P(UcxTwoProcess, SenderKilledMidBatchGivesReceiverAnError) {
  UcxOptions options = TestOptions(GetParam());
  options.receive_stall_timeout = absl::Seconds(2);
  auto rx = CreateUcxTransport(options);
  ASSERT_TRUE(rx.ok()) << rx.status();
  // A kill can fall between batches: the one in flight had all its data and the next was not
  // announced yet, so nothing is left to fail. Such an attempt tests nothing, and the next one
  // starts a new sender; the deadlines only bound a hang on a loaded machine.
  constexpr int kAttempts = 5;
  absl::Status error;
  absl::Time killed;
  for (int attempt = 0; attempt < kAttempts && error.ok(); ++attempt) {
    // 64 x 4 MiB = 256 MiB batches, back to back, for at most 90 s.
    auto child = Child::Start(
        {kPeer, "stream", ToHex((*rx)->LocalAddress()), "64", absl::StrCat(4 << 20), "90"});
    ASSERT_TRUE(child.ok()) << child.status();
    const uint64_t streamed = (*rx)->GetMetrics().bytes_received + (300u << 20);
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while ((*rx)->GetMetrics().bytes_received < streamed && absl::Now() < give_up) {
      auto got = (*rx)->Receive(absl::Now() + absl::Milliseconds(5));  // drop whole batches
    }
    ASSERT_GE((*rx)->GetMetrics().bytes_received, streamed) << "child never streamed";
    child->Kill();
    killed = absl::Now();
    // The batch in flight fails at its first read from the dead process, by UCX's failure
    // detection or by the stall timeout.
    while (absl::Now() - killed < absl::Seconds(60)) {
      auto got = (*rx)->Receive(absl::Now() + absl::Milliseconds(100));
      if (got.ok()) continue;  // all its data was read before the kill
      if (got.status().code() != absl::StatusCode::kDeadlineExceeded) {
        error = got.status();
        break;
      }
      if ((*rx)->GetMetrics().receive_pending_batches == 0) break;  // nothing was in flight
    }
    ASSERT_TRUE(!error.ok() || (*rx)->GetMetrics().receive_pending_batches == 0)
        << "a batch in flight never failed";
  }
  ASSERT_FALSE(error.ok()) << "no kill in " << kAttempts << " found a batch in flight";
  const absl::Time first_error = absl::Now();
  std::cerr << "receiver after SIGKILL of sender: " << error << " after " << first_error - killed
            << "\n";
  EXPECT_NE(error.code(), absl::StatusCode::kDataLoss);
  // The sender had two 256 MiB batches in flight; over shared memory the second waits in the
  // receive window behind the first. None may be left pending: each fails at its first CMA read
  // from the dead process, over TCP by UCX's failure detection or, one whose data never started,
  // by the stall timeout (a stalled sender's queue: BatchesQueuedBehindAStalledBatchFailWithIt).
  const absl::Duration settle = options.receive_stall_timeout + absl::Seconds(30);
  Metrics m = (*rx)->GetMetrics();
  while (m.receive_pending_batches > 0 && absl::Now() - first_error < settle) {
    absl::SleepFor(absl::Milliseconds(10));
    m = (*rx)->GetMetrics();
  }
  EXPECT_EQ(m.receive_pending_batches, 0u) << "batches left pending after the first failed";
  const bool shared_memory = std::string_view(GetParam().tls).starts_with("posix");
  EXPECT_EQ(m.receive_buffers_deferred > 0, shared_memory);
}

TEST_P(UcxTwoProcess, ReceiverKilledGivesSenderAnError) {
  auto tx = CreateUcxTransport(TestOptions(GetParam()));
  ASSERT_TRUE(tx.ok()) << tx.status();
  auto child = Child::Start({kPeer, "recv", "30"});
  ASSERT_TRUE(child.ok()) << child.status();
  auto line = child->ReadLine(absl::Now() + absl::Seconds(20), {"ADDR "});
  ASSERT_TRUE(line.ok() && line->starts_with("ADDR ")) << line.status();
  auto peer = (*tx)->Connect(testing::FromHex(line->substr(5)));
  ASSERT_TRUE(peer.ok()) << peer.status();
  // Another process on this host: shared memory wherever UCX_TLS has it (Options default).
  const bool shared_memory = std::string_view(GetParam().tls).starts_with("posix");
  EXPECT_EQ((*tx)->GetMetrics().local_peers, shared_memory ? 1u : 0u);
  std::vector<uint8_t> data(4 << 20, 5);
  std::vector<std::span<const uint8_t>> batch(64, std::span<const uint8_t>(data));
  int completed = 0;
  absl::Status error;
  absl::Time killed = absl::InfiniteFuture();
  std::vector<TransferId> ids;
  for (int i = 0; i < 200 && error.ok(); ++i) {
    SubmitOptions o;
    o.deadline = absl::Now() + absl::Seconds(5);
    auto id = (*tx)->Submit(*peer, batch, o);
    if (!id.ok()) {
      error = id.status();
      break;
    }
    error = (*tx)->Wait(*id, absl::Now() + absl::Seconds(10));
    if (error.ok() && ++completed == 2) {
      // Kill while the next batch streams.
      std::thread([&child, &killed] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        killed = absl::Now();
        child->Kill();
      }).detach();
    }
  }
  std::cerr << "sender after SIGKILL of receiver: " << error << "\n";
  EXPECT_FALSE(error.ok());
  EXPECT_GE(completed, 2);
  EXPECT_LT(absl::Now() - killed, absl::Minutes(1));  // one batch's deadline, not 200 batches
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTwoProcess, ::testing::ValuesIn(kTlsCases), TlsName);

}  // namespace
}  // namespace glimpse::transport

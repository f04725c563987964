// UcxTransport between two engines in one process, over shm and over tcp; and a bare UCP
// worker posing as a peer that announces batches and never sends their data.
#include "core/transport/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <thread>

#include "core/transport/testing/peer_util.h"
#include "core/transport/ucx/ucx_locality.h"
#include "core/transport/ucx/ucx_wire.h"
#include "core/transport/ucx_test_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::transport {
namespace {

using testing::CheckPattern;
using testing::FillPattern;

struct Pair {
  std::unique_ptr<Transport> a, b;
  PeerId a_to_b = 0;
};

Pair MakePair(UcxOptions options) {
  Pair p;
  auto a = CreateUcxTransport(options);
  auto b = CreateUcxTransport(options);
  EXPECT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  p.a = *std::move(a);
  p.b = *std::move(b);
  auto peer = p.a->Connect(p.b->LocalAddress());
  EXPECT_TRUE(peer.ok()) << peer.status();
  p.a_to_b = *peer;
  return p;
}

std::vector<std::vector<uint8_t>> MakeBuffers(size_t n, size_t size, uint64_t batch) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < n; ++i) {
    out.emplace_back(size == 0 ? testing::MixedSize(i) : size);
    FillPattern(out.back(), 1, batch, i);
  }
  return out;
}

std::vector<std::span<const uint8_t>> Spans(const std::vector<std::vector<uint8_t>>& v) {
  return {v.begin(), v.end()};
}

using UcxInProcess = UcxTlsTest;

TEST_P(UcxInProcess, BatchesOf1To64BuffersOf1ByteTo4MiB) {
  Pair p = MakePair(TestOptions(GetParam()));
  const std::pair<size_t, size_t> shapes[] = {
      {1, 1}, {3, 4097}, {64, 65536}, {7, (1 << 20) + 13}, {16, 4 << 20}, {64, 0}, {1, 4 << 20}};
  uint64_t batch = 0;
  for (auto [n, size] : shapes) {
    auto bufs = MakeBuffers(n, size, batch);
    auto spans = Spans(bufs);
    auto id = p.a->Submit(p.a_to_b, spans);
    ASSERT_TRUE(id.ok()) << id.status();
    auto got = p.b->Receive(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(20)).ok());
    EXPECT_TRUE(got->checksummed());
    ASSERT_EQ(got->buffers().size(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got->buffers()[i].size(), bufs[i].size());
      ASSERT_TRUE(CheckPattern(got->buffers()[i], 1, batch, i))
          << "batch " << batch << " buf " << i;
    }
    ++batch;
  }
  Metrics m = p.a->GetMetrics();
  EXPECT_EQ(m.transfers_completed, batch);
  EXPECT_EQ(m.inflight_bytes, 0u);
  Metrics mb = p.b->GetMetrics();
  EXPECT_EQ(mb.batches_received, batch);
  EXPECT_EQ(mb.receive_pending_batches, 0u);
  // 16 x 4 MiB is more than the default local receive window: held back over shared memory only.
  EXPECT_EQ(mb.receive_buffers_deferred > 0, m.local_peers > 0) << mb.receive_buffers_deferred;
}

// A receive window of one buffer (UcxOptions::local_receive_window_bytes): batches submitted
// together queue behind each other at the receiver, whole and in order, and none is left pending.
TEST_P(UcxInProcess, BatchesQueuedBehindAReceiveWindowArriveWholeAndInOrder) {
  UcxOptions options = TestOptions(GetParam());
  options.local_receive_window_bytes = 1;
  Pair p = MakePair(options);
  const std::pair<size_t, size_t> shapes[] = {{3, (1 << 20) + 5}, {64, 0},      {1, 1},
                                              {8, 65536},         {2, 3 << 20}, {5, 4097}};
  std::vector<std::vector<std::vector<uint8_t>>> bufs;
  std::vector<TransferId> ids;
  for (uint64_t batch = 0; batch < std::size(shapes); ++batch) {
    bufs.push_back(MakeBuffers(shapes[batch].first, shapes[batch].second, batch));
    auto id = p.a->Submit(p.a_to_b, Spans(bufs.back()));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  const bool local = p.a->GetMetrics().local_peers > 0;
  std::vector<bool> seen(std::size(shapes), false);
  for (uint64_t n = 0; n < std::size(shapes); ++n) {
    auto got = p.b->Receive(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << "batch " << n << ": " << got.status();
    // Over TCP (no window) batches may complete out of order; the shapes' counts differ.
    uint64_t batch = 0;
    while (batch < std::size(shapes) && shapes[batch].first != got->buffers().size()) ++batch;
    ASSERT_LT(batch, std::size(shapes));
    if (local) EXPECT_EQ(batch, n) << "one sender's batches pass its window in order";
    seen[batch] = true;
    for (size_t i = 0; i < bufs[batch].size(); ++i) {
      ASSERT_TRUE(CheckPattern(got->buffers()[i], 1, batch, i))
          << "batch " << batch << " buf " << i;
    }
  }
  for (TransferId id : ids) EXPECT_TRUE(p.a->Wait(id, absl::Now() + absl::Seconds(20)).ok());
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
  Metrics m = p.b->GetMetrics();
  EXPECT_EQ(m.receive_pending_batches, 0u);
  EXPECT_EQ(m.receive_errors, 0u);
  // All but the first batch's first buffer wait when the window holds one buffer.
  if (local) EXPECT_GT(m.receive_buffers_deferred, 64u);
  if (!local) EXPECT_EQ(m.receive_buffers_deferred, 0u);
}

TEST_P(UcxInProcess, CorruptedChecksumIsDataLoss) {
  Pair p = MakePair(TestOptions(GetParam()));
  auto bufs = MakeBuffers(4, 100000, 0);
  auto spans = Spans(bufs);
  TEST_CorruptUcxChecksums(*p.a, true);
  auto id = p.a->Submit(p.a_to_b, spans, SubmitOptions{});
  ASSERT_TRUE(id.ok());
  auto got = p.b->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(p.b->GetMetrics().checksum_errors, 1u);
  EXPECT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(10)).ok());
}

// SubmitOptions::checksum off (every service batch: pages carry their own CRC32Cs): the bytes
// arrive intact, the receiver says it did not verify them, and the header's CRC field is not
// consulted (a corrupted one is not DataLoss).
TEST_P(UcxInProcess, BatchesWithoutChecksumArriveUnverified) {
  Pair p = MakePair(TestOptions(GetParam()));
  const std::pair<size_t, size_t> shapes[] = {{1, 1}, {64, 0}, {5, (4 << 20) + 3}};
  for (uint64_t batch = 0; batch < std::size(shapes); ++batch) {
    auto bufs = MakeBuffers(shapes[batch].first, shapes[batch].second, batch);
    SubmitOptions o;
    o.checksum = false;
    TEST_CorruptUcxChecksums(*p.a, batch == 1);
    auto id = p.a->Submit(p.a_to_b, Spans(bufs), o);
    ASSERT_TRUE(id.ok()) << id.status();
    auto got = p.b->Receive(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(20)).ok());
    EXPECT_FALSE(got->checksummed());
    ASSERT_EQ(got->buffers().size(), bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) {
      ASSERT_TRUE(CheckPattern(got->buffers()[i], 1, batch, i))
          << "batch " << batch << " buf " << i;
    }
  }
  Metrics m = p.b->GetMetrics();
  EXPECT_EQ(m.batches_received, std::size(shapes));
  EXPECT_EQ(m.checksum_errors, 0u);
}

TEST_P(UcxInProcess, GarbageAndUnreachableAddressesAreClearErrors) {
  auto a = CreateUcxTransport(TestOptions(GetParam()));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Connect("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  std::string addr = (*a)->LocalAddress();
  addr[addr.size() / 2] ^= 1;
  EXPECT_EQ((*a)->Connect(addr).status().code(), absl::StatusCode::kInvalidArgument);
  std::string gone;
  {
    auto b = CreateUcxTransport(TestOptions(GetParam()));
    ASSERT_TRUE(b.ok());
    gone = (*b)->LocalAddress();
  }
  absl::Time start = absl::Now();
  auto peer = (*a)->Connect(gone);
  if (peer.ok()) {  // the failure may surface on first use
    std::vector<uint8_t> x(1 << 20, 1);
    std::vector<std::span<const uint8_t>> s = {x};
    SubmitOptions o;
    o.deadline = absl::Now() + absl::Seconds(3);
    auto id = (*a)->Submit(*peer, s, o);
    if (id.ok()) {
      absl::Status st = (*a)->Wait(*id, absl::Now() + absl::Minutes(2));
      EXPECT_FALSE(st.ok());
      std::cerr << "unreachable peer: " << st << "\n";
    }
  } else {
    std::cerr << "unreachable peer: " << peer.status() << "\n";
  }
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));  // the submit's deadline, not Wait's
}

TEST_P(UcxInProcess, DeadlineExpiryFailsBothSides) {
  UcxOptions options = TestOptions(GetParam());
  options.receive_stall_timeout = absl::Seconds(1);
  Pair p = MakePair(options);
  auto bufs = MakeBuffers(64, 4 << 20, 0);  // 256 MiB: cannot finish in 1 us
  auto spans = Spans(bufs);
  SubmitOptions o;
  o.deadline = absl::Now() + absl::Microseconds(1);
  auto id = p.a->Submit(p.a_to_b, spans, o);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Time submitted = absl::Now();
  EXPECT_EQ(p.a->Wait(*id, absl::Now() + absl::Minutes(2)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // Done once UCX released the sends (cancelled or finished), kAbortGrace after expiry: well
  // before Wait's own deadline, with room for a loaded machine.
  std::cerr << "sender done after " << absl::Now() - submitted << "\n";
  EXPECT_LT(absl::Now() - submitted, absl::Minutes(1));
  EXPECT_EQ(p.a->GetMetrics().inflight_bytes, 0u);
  // The receiver must not hang: it reports an error, or (in-process shm, where the receiver
  // pulls by CMA from memory that stays valid) a whole batch that passed its checksum.
  absl::Time start = absl::Now();
  auto got = p.b->Receive(absl::Now() + absl::Minutes(2));
  std::cerr << "receiver: " << got.status() << "\n";
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));  // the stall timeout, not the deadline
  if (got.ok()) {
    EXPECT_EQ(got->total_bytes(), 256u << 20);
  }
  // The endpoint was retired (flush close) to abort the send: the caller must reconnect.
  EXPECT_EQ(p.a->Submit(p.a_to_b, spans).status().code(), absl::StatusCode::kUnavailable);
  auto again = p.a->Connect(p.b->LocalAddress());
  ASSERT_TRUE(again.ok()) << again.status();
  auto small = MakeBuffers(2, 4097, 1);
  auto id2 = p.a->Submit(*again, Spans(small));
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_TRUE(p.a->Wait(*id2, absl::Now() + absl::Seconds(10)).ok());
  for (int i = 0; i < 3; ++i) {  // skip what is left of the aborted batch, if anything
    auto next = p.b->Receive(absl::Now() + absl::Seconds(5));
    if (next.ok() && next->buffers().size() == 2) {
      EXPECT_TRUE(CheckPattern(next->buffers()[1], 1, 1, 1));
      return;
    }
  }
  ADD_FAILURE() << "the batch on the new endpoint never arrived";
}

TEST_P(UcxInProcess, CancelEndsTransferWithCancelled) {
  Pair p = MakePair(TestOptions(GetParam()));
  auto bufs = MakeBuffers(64, 4 << 20, 0);
  auto spans = Spans(bufs);
  auto id = p.a->Submit(p.a_to_b, spans);
  ASSERT_TRUE(id.ok());
  absl::Time cancelled = absl::Now();
  ASSERT_TRUE(p.a->Cancel(*id).ok());
  absl::Status st = p.a->Wait(*id, absl::Now() + absl::Minutes(2));
  std::cerr << "cancelled transfer done after " << absl::Now() - cancelled << ": " << st << "\n";
  EXPECT_LT(absl::Now() - cancelled, absl::Minutes(1));  // kAbortGrace, not Wait's deadline
  EXPECT_TRUE(st.code() == absl::StatusCode::kCancelled || st.ok()) << st;  // ok: it won the race
  EXPECT_EQ(p.a->GetMetrics().inflight_bytes, 0u);
}

// The destructor drains: a transfer in flight on either engine must neither hang nor abort.
TEST_P(UcxInProcess, DestroyWithTransfersInFlight) {
  for (bool sender_first : {true, false}) {
    Pair p = MakePair(TestOptions(GetParam()));
    auto bufs = MakeBuffers(16, 4 << 20, 0);
    auto spans = Spans(bufs);
    auto id = p.a->Submit(p.a_to_b, spans);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::Time start = absl::Now();
    if (sender_first) {
      p.a.reset();
      p.b.reset();
    } else {
      p.b.reset();
      p.a.reset();
    }
    // A sender whose receiver is gone first cannot learn it over pure shm (no peer failure
    // detection in UCX 1.13): its destructor gives up after kShutdownDrain and leaks the worker.
    std::cerr << (sender_first ? "sender" : "receiver") << " destroyed first: engines gone after "
              << absl::Now() - start << "\n";
    EXPECT_LT(absl::Now() - start, absl::Minutes(1));  // kShutdownDrain at most, not a hang
  }
}

TEST_P(UcxInProcess, BackPressureBoundIsNeverExceeded) {
  UcxOptions options = TestOptions(GetParam());
  options.max_inflight_bytes = 8 << 20;
  Pair p = MakePair(options);
  std::thread drain([&] {
    for (int i = 0; i < 64 + 20; ++i) {
      if (!p.b->Receive(absl::Now() + absl::Seconds(1)).ok()) break;
    }
  });
  auto small = MakeBuffers(1, 1 << 20, 0);
  auto big = MakeBuffers(2, 4 << 20, 0);
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&] {
      for (int i = 0; i < 16; ++i) {
        SubmitOptions o;
        o.deadline = absl::Now() + absl::Seconds(20);
        auto id = p.a->Submit(p.a_to_b, Spans(small), o);
        ASSERT_TRUE(id.ok()) << id.status();
        ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(20)).ok());
      }
    });
  }
  for (auto& t : senders) t.join();
  int rejected = 0;
  for (int i = 0; i < 20 && rejected == 0; ++i) {
    auto id = p.a->Submit(p.a_to_b, Spans(big));  // 8 MiB: fills the bound
    ASSERT_TRUE(id.ok()) << id.status();
    SubmitOptions nb;
    nb.block = false;
    auto id2 = p.a->Submit(p.a_to_b, Spans(small), nb);
    if (!id2.ok()) {
      EXPECT_EQ(id2.status().code(), absl::StatusCode::kResourceExhausted);
      ++rejected;
    } else {
      ASSERT_TRUE(p.a->Wait(*id2, absl::Now() + absl::Seconds(20)).ok());
    }
    ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(20)).ok());
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(p.a->Submit(p.a_to_b, Spans(MakeBuffers(3, 4 << 20, 0))).status().code(),
            absl::StatusCode::kInvalidArgument);  // 12 MiB can never fit 8 MiB
  Metrics m = p.a->GetMetrics();
  EXPECT_LE(m.peak_inflight_bytes, options.max_inflight_bytes);
  EXPECT_GE(m.peak_inflight_bytes, 4u << 20);
  p.a->Disconnect(p.a_to_b).IgnoreError();
  drain.join();
}

TEST_P(UcxInProcess, RegisteredMemoryShips) {
  Pair p = MakePair(TestOptions(GetParam()));
  std::vector<uint8_t> arena(8 << 20);
  FillPattern(arena, 3, 0, 0);
  auto region = p.a->RegisterMemory(arena.data(), arena.size());
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<std::span<const uint8_t>> s = {{arena.data(), 4 << 20},
                                             {arena.data() + (4 << 20), 4 << 20}};
  auto id = p.a->Submit(p.a_to_b, s);
  ASSERT_TRUE(id.ok());
  auto got = p.b->Receive(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(
      std::equal(got->buffers()[1].begin(), got->buffers()[1].end(), arena.begin() + (4 << 20)));
}

// Without busy polling (progress_spin 0) the progress thread sleeps on UCX's event fd between
// events and must still be woken for every step. Batches that landed in full but were not yet
// Receive()d (so not yet checksummed) are not "stalled": they wait past receive_stall_timeout.
TEST_P(UcxInProcess, NoBusyPollingAndBatchesWaitingForReceive) {
  UcxOptions options = TestOptions(GetParam());
  options.progress_spin = absl::ZeroDuration();
  options.receive_stall_timeout = absl::Milliseconds(300);
  Pair p = MakePair(options);
  const std::pair<size_t, size_t> shapes[] = {{1, 1}, {5, (1 << 20) + 3}, {64, 0}};
  std::vector<std::vector<std::vector<uint8_t>>> bufs;
  for (uint64_t batch = 0; batch < std::size(shapes); ++batch) {
    bufs.push_back(MakeBuffers(shapes[batch].first, shapes[batch].second, batch));
    auto id = p.a->Submit(p.a_to_b, Spans(bufs.back()));
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(20)).ok());
  }
  absl::SleepFor(absl::Seconds(1));  // > receive_stall_timeout, nobody receiving
  for (uint64_t batch = 0; batch < std::size(shapes); ++batch) {
    auto got = p.b->Receive(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << "batch " << batch << ": " << got.status();
    ASSERT_EQ(got->buffers().size(), bufs[batch].size());
    for (size_t i = 0; i < bufs[batch].size(); ++i) {
      ASSERT_TRUE(CheckPattern(got->buffers()[i], 1, batch, i))
          << "batch " << batch << " buf " << i;
    }
  }
  Metrics m = p.b->GetMetrics();
  EXPECT_EQ(m.batches_received, std::size(shapes));
  EXPECT_EQ(m.receive_errors, 0u);
}

// Once a caller has driven the worker and left, the progress thread takes it back (after
// kDriverGrace): a transfer nobody waits for still completes, and its batches arrive.
TEST_P(UcxInProcess, TransferCompletesWithoutWaitAfterACallerDrove) {
  Pair p = MakePair(TestOptions(GetParam()));
  std::vector<std::vector<uint8_t>> first = MakeBuffers(2, 1 << 20, 0);
  auto waited = p.a->Submit(p.a_to_b, Spans(first));
  ASSERT_TRUE(waited.ok()) << waited.status();
  ASSERT_TRUE(p.a->Wait(*waited, absl::Now() + absl::Seconds(20)).ok());
  // Nothing arrives at `a`: this caller surely drives a's worker until its deadline, then leaves.
  EXPECT_EQ(p.a->Receive(absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::vector<std::vector<uint8_t>> second = MakeBuffers(3, 1 << 20, 1);
  auto polled = p.a->Submit(p.a_to_b, Spans(second));
  ASSERT_TRUE(polled.ok()) << polled.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::StatusOr<TransferStatus> st = p.a->GetStatus(*polled);
  while (st.ok() && !st->done && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
    st = p.a->GetStatus(*polled);
  }
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_TRUE(st->done) << "transfer not done without Wait()";
  EXPECT_TRUE(st->status.ok()) << st->status;
  for (uint64_t batch = 0; batch < 2; ++batch) {
    auto got = p.b->Receive(absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << "batch " << batch << ": " << got.status();
    const auto& sent = batch == 0 ? first : second;
    ASSERT_EQ(got->buffers().size(), sent.size());
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_TRUE(CheckPattern(got->buffers()[i], 1, batch, i))
          << "batch " << batch << " buf " << i;
    }
  }
}

TEST(UcxTransport, NegativeProgressSpinIsInvalid) {
  UcxOptions options;
  options.progress_spin = absl::Microseconds(-1);
  EXPECT_EQ(CreateUcxTransport(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(UcxTransport, PureShmWithoutFailureDetectionIsRefusedUnlessTheEnginesShareAHost) {
  setenv("UCX_TLS", "posix,sysv,cma,self", 1);
  UcxOptions remote;  // as if on different hosts: neither offers shared-memory endpoints
  remote.local_shared_memory = false;
  auto a = CreateUcxTransport(remote);
  auto b = CreateUcxTransport(remote);
  ASSERT_TRUE(a.ok() && b.ok());
  auto peer = (*a)->Connect((*b)->LocalAddress());
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kFailedPrecondition) << peer.status();
  EXPECT_EQ((*a)->GetMetrics().local_peers, 0u);
  auto c = CreateUcxTransport();  // local_shared_memory: same host, so shared memory it is
  auto d = CreateUcxTransport();
  ASSERT_TRUE(c.ok() && d.ok());
  auto local = (*c)->Connect((*d)->LocalAddress());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*c)->GetMetrics().local_peers, 1u);
  EXPECT_TRUE((*c)->Disconnect(*local).ok());  // while d lives: nothing tells c when it is gone
  EXPECT_EQ((*c)->Connect((*b)->LocalAddress()).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "b does not offer shared-memory endpoints";
}

TEST(UcxTransport, LocalPeersUseSharedMemoryOnlyWhereUcxTlsHasIt) {
  setenv("UCX_TLS", "tcp,self", 1);  // no shared-memory transport: UCX's failure detection stays
  auto a = CreateUcxTransport();
  auto b = CreateUcxTransport();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Connect((*b)->LocalAddress()).ok());
  EXPECT_EQ((*a)->GetMetrics().local_peers, 0u);
  setenv("UCX_TLS", "posix,sysv,cma,tcp,self", 1);
  auto c = CreateUcxTransport();
  auto d = CreateUcxTransport();
  ASSERT_TRUE(c.ok() && d.ok());
  auto local = (*c)->Connect((*d)->LocalAddress());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*c)->GetMetrics().local_peers, 1u);
  EXPECT_TRUE((*c)->Disconnect(*local).ok());
}

// Options for an engine that raw UCP senders talk to over `tls` (UCX_TLS is set for the engines
// made next): a batch that sees no data fails after 300 ms.
UcxOptions RawPeerOptions(const char* tls) {
  setenv("UCX_TLS", tls, 1);
  UcxOptions options;
  options.receive_stall_timeout = absl::Milliseconds(300);
  return options;
}

// A bare UCP worker that tag-sends hand-made messages to an engine: a peer that announces
// batches and then sends nothing (hung, or killed between the header and the data).
class RawUcpSender {
 public:
  explicit RawUcpSender(std::string_view engine_address) {
    ucp_config_t* config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    EXPECT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    EXPECT_EQ(ucp_worker_create(context_, &wp, &worker_), UCS_OK);
    absl::StatusOr<ucx_wire::ParsedAddress> a = ucx_wire::UnwrapAddress(engine_address);
    EXPECT_TRUE(a.ok()) << a.status();
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(a->ucp_address.data());
    EXPECT_EQ(ucp_ep_create(worker_, &ep, &ep_), UCS_OK);
    ucp_address_t* own = nullptr;
    size_t len = 0;
    EXPECT_EQ(ucp_worker_get_address(worker_, &own, &len), UCS_OK);
    address_.assign(reinterpret_cast<const uint8_t*>(own),
                    reinterpret_cast<const uint8_t*>(own) + len);
    ucp_worker_release_address(worker_, own);
  }
  ~RawUcpSender() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    Complete(ucp_ep_close_nbx(ep_, &p));
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  std::span<const uint8_t> ucp_address() const { return address_; }
  void Send(uint64_t tag, std::span<const uint8_t> bytes) {
    ucp_request_param_t p{};
    Complete(ucp_tag_send_nbx(ep_, bytes.data(), bytes.size(), tag, &p));
  }
  // Announces batch `seq` of engine `sender` with buffers of `sizes` (no CRC), as an engine on
  // host `shm_host` (0: none) would.
  void SendHeader(uint32_t sender, uint32_t seq, std::vector<uint64_t> sizes,
                  uint64_t shm_host = 0) {
    ucx_wire::BatchHeader h;
    h.sender = sender;
    h.seq = seq;
    h.has_crc = false;
    for (uint64_t size : sizes) h.total_bytes += size;
    h.sizes = std::move(sizes);
    h.sender_address = ucx_wire::WrapAddress(sender, shm_host, ucp_address());
    Send(ucx_wire::MakeTag(ucx_wire::kKindHeader, sender, seq, 0), ucx_wire::EncodeHeader(h));
  }

 private:
  void Complete(ucs_status_ptr_t r) {  // progresses until `r` is done, at most 10 s
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS &&
           absl::Now() < give_up) {
      ucp_worker_progress(worker_);
    }
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
  }
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::vector<uint8_t> address_;
};

// A local sender announces two batches and sends no data. The first stalls; the second, which
// waits behind it in the sender's receive window, fails with it rather than being posted and
// stalling on its own one timeout later.
TEST(UcxTransport, BatchesQueuedBehindAStalledBatchFailWithIt) {
  const UcxOptions options = RawPeerOptions("posix,sysv,cma,tcp,self");
  auto rx = CreateUcxTransport(options);
  ASSERT_TRUE(rx.ok()) << rx.status();
  RawUcpSender sender((*rx)->LocalAddress());
  constexpr uint32_t kSender = 0x1234567;
  for (uint32_t seq = 0; seq < 2; ++seq) {
    sender.SendHeader(kSender, seq,
                      {options.local_receive_window_bytes, options.local_receive_window_bytes},
                      ucx_locality::LocalHostKey());
  }
  auto first = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kDeadlineExceeded) << first.status();
  EXPECT_THAT(first.status().message(),
              ::testing::HasSubstr("batch 0 from engine 1234567: no data"));
  auto second = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded) << second.status();
  EXPECT_THAT(second.status().message(),
              ::testing::HasSubstr("batch 1 from engine 1234567: not started; an earlier batch"));
  Metrics m = (*rx)->GetMetrics();
  EXPECT_EQ(m.receive_pending_batches, 0u);
  EXPECT_EQ(m.receive_errors, 2u);
  // Each buffer fills the window: all but batch 0's first waited.
  EXPECT_EQ(m.receive_buffers_deferred, 3u);
}

// Forged headers: one asks for 64 GiB in 16 buffers of 4 GiB, one is longer than any valid header.
// Both are refused before anything is allocated for them, and the engine keeps serving.
TEST(UcxTransport, AForgedHeaderBeyondTheReceiveBudgetIsRefusedBeforeAnyAllocation) {
  const UcxOptions options = RawPeerOptions("tcp,self");
  auto rx = CreateUcxTransport(options);
  ASSERT_TRUE(rx.ok()) << rx.status();
  RawUcpSender sender((*rx)->LocalAddress());
  constexpr uint32_t kSender = 0x1234567;
  sender.SendHeader(kSender, 0, std::vector<uint64_t>(16, ucx_wire::kMaxBufferBytes));
  auto refused = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("refused batch 0 from engine 1234567 (16 buffers"));
  sender.Send(ucx_wire::MakeTag(ucx_wire::kKindHeader, kSender, 1, 0),
              std::vector<uint8_t>(ucx_wire::kMaxHeaderBytes + 1000, 0x5A));
  auto oversized = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(oversized.status().code(), absl::StatusCode::kResourceExhausted) << oversized.status();
  EXPECT_THAT(oversized.status().message(), ::testing::HasSubstr("refused a batch header of"));
  // A real sender after them: served.
  auto tx = CreateUcxTransport(options);
  ASSERT_TRUE(tx.ok()) << tx.status();
  auto peer = (*tx)->Connect((*rx)->LocalAddress());
  ASSERT_TRUE(peer.ok()) << peer.status();
  auto bufs = MakeBuffers(3, 70000, 9);
  auto id = (*tx)->Submit(*peer, Spans(bufs), {});
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(CheckPattern(got->buffers()[2], 1, 9, 2));
  EXPECT_TRUE((*tx)->Wait(*id, absl::Now() + absl::Seconds(10)).ok());
  const Metrics m = (*rx)->GetMetrics();
  EXPECT_EQ(m.receive_refused, 2u);
  EXPECT_EQ(m.receive_pending_bytes, 0u);
}

// A sender whose data is longer than its header announced: the receive is truncated (UCX may
// complete it inside the call that posts it), the batch fails with DataLoss, and nothing else
// happens to the engine.
TEST(UcxTransport, DataLongerThanItsHeaderSaysIsDataLoss) {
  const UcxOptions options = RawPeerOptions("tcp,self");
  auto rx = CreateUcxTransport(options);
  ASSERT_TRUE(rx.ok()) << rx.status();
  RawUcpSender sender((*rx)->LocalAddress());
  constexpr uint32_t kSender = 0x7654321;
  // Eager data sent before its header waits unexpected at the receiver, so the receive matches
  // (and fails) in the call that posts it (UCX reports that by the call's status or, for some
  // protocols, by a callback inside the call); a rendezvous sent after the header matches a
  // posted receive. Each batch is of two buffers, so a batch that fails at its first post must
  // neither post the second nor stay pending.
  constexpr uint64_t kBudget = 64 + 64;
  sender.Send(ucx_wire::MakeTag(ucx_wire::kKindData, kSender, 0, 0), std::vector<uint8_t>(100, 7));
  sender.SendHeader(kSender, 0, {64, 64});
  auto eager = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(eager.status().code(), absl::StatusCode::kDataLoss) << eager.status();
  sender.SendHeader(kSender, 1, {64, 64});
  std::thread data([&] {  // a rendezvous completes only once the receiver matched it
    sender.Send(ucx_wire::MakeTag(ucx_wire::kKindData, kSender, 1, 0),
                std::vector<uint8_t>(size_t{1} << 20, 7));
  });
  auto rendezvous = (*rx)->Receive(absl::Now() + absl::Seconds(10));
  data.join();
  EXPECT_EQ(rendezvous.status().code(), absl::StatusCode::kDataLoss) << rendezvous.status();
  // Both batches left the budget (each failed batch is retired once its receives are done).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while ((*rx)->GetMetrics().receive_pending_bytes != 0 && absl::Now() < give_up) {
    (void)(*rx)->Receive(absl::Now() + absl::Milliseconds(20));  // drives the worker
  }
  EXPECT_EQ((*rx)->GetMetrics().receive_pending_bytes, 0u) << "of " << kBudget << " per batch";
}

// Ships `buffers` buffers of `size` bytes from a to b and expects b to refuse the batch with
// `code` and a message holding `why`; waits for the sender's transfer to end, however UCX ends it.
void ExpectRefused(Pair& p, size_t buffers, size_t size, absl::StatusCode code,
                   const std::string& why) {
  auto big = MakeBuffers(buffers, size, 0);
  SubmitOptions o;
  o.deadline = absl::Now() + absl::Seconds(5);
  auto id = p.a->Submit(p.a_to_b, Spans(big), o);
  ASSERT_TRUE(id.ok()) << id.status();
  auto refused = p.b->Receive(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), code) << refused.status();
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr(why));
  (void)p.a->Wait(*id, absl::Now() + absl::Seconds(10));
}

// Ships a batch of `buffers` buffers of `size` bytes from a to b and expects it whole.
void ExpectArrives(Pair& p, size_t buffers, size_t size) {
  auto batch = MakeBuffers(buffers, size, 1);
  auto id = p.a->Submit(p.a_to_b, Spans(batch), {});
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = p.b->Receive(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < batch.size(); ++i) EXPECT_TRUE(CheckPattern(got->buffers()[i], 1, 1, i));
  EXPECT_TRUE(p.a->Wait(*id, absl::Now() + absl::Seconds(10)).ok());
}

// A sender's batch beyond its share of the receive budget is refused and its bytes dropped as
// they come; the sender's transfer ends, and its next batch, within budget, arrives whole.
TEST_P(UcxInProcess, ABatchBeyondTheSendersReceiveBudgetIsRefusedAndTheNextArrives) {
  UcxOptions options = TestOptions(GetParam());
  options.max_receive_bytes_per_sender = 1 << 20;
  Pair p = MakePair(options);
  ExpectRefused(p, 2, 1 << 20, absl::StatusCode::kResourceExhausted, "receive budget");
  ExpectArrives(p, 4, 100000);
  const Metrics m = p.b->GetMetrics();
  EXPECT_EQ(m.receive_refused, 1u);
  EXPECT_EQ(m.receive_pending_bytes, 0u);  // the delivered batch left the budget
}

// A sender the screen refuses gets nothing allocated: its batch is refused when its header
// arrives and its bytes are dropped as they come; once the screen lets it in, its batches arrive.
TEST_P(UcxInProcess, ABatchFromAScreenedOutSenderIsRefusedAtItsHeader) {
  Pair p = MakePair(TestOptions(GetParam()));
  const std::string sender = p.a->LocalAddress();
  p.b->ScreenSenders([&](std::string_view s) { return s != sender; });
  ExpectRefused(p, 4, 1 << 20, absl::StatusCode::kPermissionDenied, "not a registered peer");
  const Metrics m = p.b->GetMetrics();
  EXPECT_EQ(m.peers_refused, 1u);
  EXPECT_EQ(m.bytes_received, 0u);
  EXPECT_EQ(m.receive_pending_bytes, 0u);  // the receive budget was never taken

  p.b->ScreenSenders({});
  ExpectArrives(p, 2, 1000);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxInProcess, ::testing::ValuesIn(kTlsCases), TlsName);

}  // namespace
}  // namespace glimpse::transport

// UcxTransport: the Transport over UCX (ucp tag API). One ucp context + worker per engine and a
// progress thread (every UCX call runs under the engine's mutex, the worker is
// UCS_THREAD_MODE_SERIALIZED). A thread blocked in Wait() or Receive() progresses the worker
// itself while the progress thread parks, so a busy sender or receiver is one thread, not two
// handing work across a mutex (on 2 shared cores: shm 1 MiB +3-29 %, tcp +6-31 %). UCX's own
// environment picks the transports (UCX_TLS, e.g. "posix,sysv,cma,self" for shared memory or
// "tcp,self"); Options never override it.
//
// Data path: per batch one eager header message (sizes, CRC32C, sender address) then one tag
// send per buffer. Small buffers go eager; above UCX's rendezvous threshold UCX switches to
// rendezvous on its own (shm: CMA process_vm_readv by the receiver; tcp: zero-copy
// fragments), straight from the caller's memory into a receive buffer from a recycled pool.
// Why tag rendezvous rather than RMA put into peer-registered memory: the receiver learns the
// sizes from the header and provides buffers itself, so there is no rkey exchange round trip
// per batch and no remote memory the sender could overrun; UCX already registers (and caches
// the registration of) large send buffers, and RegisterMemory() pre-registers a caller's arena
// (ucp_mem_map) so its buffers skip even that lookup. UCX 1.13's TCP transport has no native
// put, so RMA would be emulated over the same active messages anyway.
//
// Checksums and CPU: the sender computes the batch CRC32C in Submit (outside the lock), unless
// SubmitOptions::checksum is off (then neither side hashes the bytes; the header says so); the
// receiver checksums each buffer as soon as it lands, in a Receive() caller's thread while the
// worker moves the next buffers, and combines the values (Crc32cCombine). Receive buffers come
// from a last-in-first-out pool. A Wait() or Receive() caller progresses the worker itself, and
// the progress thread stays off it while a caller does and for 1 ms after, so a busy sender or
// receiver is one thread. Whoever progresses the worker busy-polls only for
// UcxOptions::progress_spin (50 us) after the last completion, then sleeps on UCX's event fd, so
// it keeps no core from the threads that move and check bytes.
//
// UCX 1.13 has no shared-memory transport that can detect a dead peer, and with peer error
// handling takes a rendezvous lane only from a transport whose memory domain can invalidate
// remote access (UCT_MD_FLAG_INVALIDATE_RMA), which CMA's cannot: with error handling, bulk data
// between processes on one host would move over TCP loopback. So endpoints to engines on the same
// host (ucx_locality, UcxOptions::local_shared_memory) go without UCX error handling and ride
// shared memory; all others keep it. The engine reads TCP in larger pieces (UcxDefaultSettings).
//
// Failure handling: endpoints (but local ones) use UCP_ERR_HANDLING_MODE_PEER. A failed endpoint
// fails its transfers with Unavailable and is force-closed. Nothing else is ever force-closed:
// UCX 1.13 asserts (ucp_request.c:684 "got REP message", process abort) when an endpoint, or its
// worker, is torn down while wireup messages are still pending on it, as happens on tcp under load.
// So a deadline or Cancel() fixes the transfer's status at once, withdraws its posted sends with
// ucp_request_cancel (sends UCX has already started, e.g. a rendezvous, run to completion) and
// retires its endpoint with a flush close: other transfers on it finish, new Submits fail with
// Unavailable and the peer must be connected again. The transfer is reported done when UCX has
// called back every send, at most kAbortGrace (2 s) after the abort; past that it is reported
// done anyway and UCX may still read the buffers (logged; the receiver's CRC32C guards the data).
// The destructor withdraws all requests, flush-closes all endpoints and flushes the worker for
// at most kShutdownDrain (5 s) before ucp_worker_destroy; if that does not drain (a peer that
// neither answers nor fails, e.g. pure shm without failure detection) it logs and leaks the
// worker rather than risk the assertion. Receive-side stalls past
// Options::receive_stall_timeout fail the batch: a receiver learns of a dead sender that way (or
// from a failed CMA read), as it has no endpoint to the sender.
#pragma once

#include <memory>
#include <span>

#include "core/transport/transport.h"

namespace glimpse::transport {

// The backend-neutral options plus the UCX backend's own knobs (services set these from the
// transport.* config keys, core/cluster/membership_config.h).
struct UcxOptions : Options {
  // Endpoints to engines on this host (ucx_locality::LocalHostKey: same boot, user,
  // IPC and PID namespaces), where both have this on and a shared-memory transport in UCX_TLS,
  // are opened without UCX peer error handling, so that UCX moves their bytes through shared
  // memory (posix/sysv, CMA). With error handling UCX 1.13 keeps them on TCP loopback, as no
  // shared-memory transport there can detect a dead peer. A local peer that dies then surfaces
  // through transfer deadlines or the receive stall timeout, not through UCX's keepalive, and the
  // endpoint to it is never flushed (it stays allocated until the engine is destroyed). NOTE: a
  // CMA read or write that finds the peer gone is fatal to this process in UCX 1.13 (no error
  // handler on the endpoint: UCX logs it FATAL and aborts; seen in the cluster soak), so the
  // services default the transport.local_shared_memory key to off.
  bool local_shared_memory = true;
  // Receives for a local shared-memory sender's buffers are posted at most this many
  // bytes ahead (at least one buffer), per sender; the rest wait in order, their bytes still at
  // the sender (UCX's rendezvous: for a large buffer only a small request crosses until the
  // receive is posted). Over shared memory the receiver pulls each buffer straight into the
  // posted one (CMA), so fewer posted buffers keep the one being written in cache. Senders over
  // TCP are not held back: there each posted receive costs a round trip through the sender
  // before its bytes move. Zero: no window. (Measurements: bench/RESULTS.md, "Transport".)
  size_t local_receive_window_bytes = size_t{2} << 20;
  // When no transport to a peer can detect its failure (e.g. UCX_TLS of shared
  // memory only: posix, sysv and CMA in UCX 1.13), Connect refuses the peer (FailedPrecondition)
  // unless this is set; failures then surface as for local_shared_memory.
  bool allow_no_peer_failure_detection = false;
  // How long the progress thread, or a Wait() / Receive() caller that progresses the
  // worker itself, keeps busy-polling after its last completion before it sleeps. Longer trades
  // CPU for wake-up latency; on a shared host a spinning thread takes the core that the peer's
  // copies or the checksums need (bench/RESULTS.md, "Transport"). Zero: never spin.
  absl::Duration progress_spin = absl::Microseconds(50);
};

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const UcxOptions& options = {});

// Test hook of a transport CreateUcxTransport made: while on, batches it submits with a checksum
// carry a wrong one, so that their receiver reports DataLoss.
void TEST_CorruptUcxChecksums(Transport& ucx, bool on);

// UCX settings every engine applies unless the environment sets them: `env` is the variable that
// overrides one, `key` the name ucp_config_modify takes. Public so that a benchmark can give
// ucx_perftest the same configuration.
struct UcxSetting {
  const char* env;
  const char* key;
  const char* value;
};
std::span<const UcxSetting> UcxDefaultSettings();

}  // namespace glimpse::transport

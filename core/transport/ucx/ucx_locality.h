// Which peers a UCX engine may reach through shared memory. UCX 1.13 offers no shared-memory
// transport under peer error handling (none can detect a dead peer), so an engine opens endpoints
// without it to peers it knows to be on its host (UcxOptions::local_shared_memory) and leaves
// everything else to TCP or RDMA with UCX's failure detection.
#pragma once

#include <cstdint>

namespace glimpse::transport::ucx_locality {

// A nonzero key that two processes share exactly when UCX's shared-memory transports can connect
// them: the same kernel boot, effective user (CMA and /proc/<pid>/fd need it), IPC namespace
// (sysv) and PID namespace (posix opens the peer's segment through /proc/<pid>/fd; CMA names the
// peer by pid). Pods on one Kubernetes node differ in their namespaces, so they get different keys.
uint64_t LocalHostKey();

// Whether a UCX_TLS value (nullptr: unset, UCX's "all") enables a shared-memory transport that
// carries active messages (posix or sysv, or an alias that includes them: all, sm, shm, mm).
// A list starting with '^' names the transports to leave out.
bool TlsHasSharedMemory(const char* ucx_tls);

}  // namespace glimpse::transport::ucx_locality

// The wiring glimpse-prefill-worker and glimpse-decode-worker share: their common config keys,
// the model, thread pool and cache node client they build from them, and their registration with
// the coordinator once the gRPC port is known.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache_client/cache_client.h"
#include "core/common/config.h"
#include "core/model/model.h"
#include "core/transport/transport.h"
#include "core/worker/coordinator_link.h"
#include "core/worker/session_state.h"

namespace glimpse::worker {

// model, threads, node_id, advertise_host, coordinator, cache_node, cache_timeout, page_tokens,
// lookahead_module, transport.allow_no_peer_failure_detection and client_tls.*. `role` names the
// default node id ("decode" → decode-<host>-<port>).
std::vector<ConfigKey> CommonWorkerKeys(std::string_view role);

struct WorkerBase {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<kernels::ThreadPool> pool;
  std::unique_ptr<cache_client::CacheClient> cache;  // null without cache_node
  transport::Options transport;                      // for the worker's own engines
  CoordinatorLinkOptions link;  // all but ucx_address and capacity_bytes; grpc_address is the host
  PrefillLimits limits;         // recall settings from the config; sinks and window as default
};

// Loads the model (the default model, fetched if missing, when `model` is empty), makes the pool
// and the cache node client (over its own UCX engine).
absl::StatusOr<WorkerBase> StartWorkerBase(const Config& c, v1::NodeRole role);

// Registers with the coordinator (nothing when `options.coordinator_address` is empty): the gRPC
// address becomes host:port, an empty node id <role>-<host>-<port>. Logs and returns null when the
// link cannot start.
std::unique_ptr<CoordinatorLink> RegisterWhenServing(
    CoordinatorLinkOptions options, int grpc_port, std::function<v1::NodeLoad()> load,
    std::function<void(const std::string&)> release);

}  // namespace glimpse::worker

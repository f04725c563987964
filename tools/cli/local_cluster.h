// A Glimpse cluster on this machine, one process per service (DESIGN.md §1): coordinator, cache
// node, decode worker, prefill worker (optional) and frontend on loopback, state under one
// directory, each service's log in <dir>/logs/<service>.log. Internal calls are mutual TLS, as in a
// deployment: a throwaway CA and a certificate per member (and one for this process, role admin)
// in <dir>/tls (core/common/grpc/certificates.h); the frontend's client API is plaintext. What
// `glimpse up` starts and `make run` talks to. With `etcd`, a local etcd member (<dir>/etcd,
// core/etcd/etcd_process.h) holds the coordinator's state instead of RocksDB in <dir>/coordinator,
// and two coordinators run on it (coordinator/leadership.h; the second's log is
// coordinator-1.log): one leads, the other takes over when it dies; every client is given both.
// Start waits until every service serves and the workers have registered with the coordinator;
// Stop (and the destructor) terminates them in reverse order, etcd last.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/service_process.h"
#include "core/etcd/etcd_process.h"

namespace glimpse::cli {

struct LocalClusterOptions {
  std::string dir;      // state and logs; created if missing
  std::string bin_dir;  // where the glimpse-* binaries are ("" = next to this program / build tree)
  std::string model;    // GGUF ("" = the default model)
  std::string lookahead_module;  // for policy method "lookahead" ("" = none)
  // The workers' eviction_profile ("" = the one beside lookahead_module, "none" = built-in).
  std::string eviction_profile;
  std::string policy_method = "none";
  double budget_ratio = 0.0;
  std::string codec = "fp16";
  int threads = 0;
  // A fixed TTL lease for every session (e.g. "2s"; the coordinator's lease.fixed_ttl), for demos
  // and tests that need a predictable tier; "" = the coordinator's estimator.
  std::string lease_ttl;
  bool prefill_worker = true;
  // Turns with more new tokens than this prefill on the prefill worker (the coordinator's
  // routing.prefill_on_decode_tokens); shorter ones on the decode worker.
  int prefill_on_decode_tokens = 128;
  bool etcd = false;  // the coordinator's state in a local etcd member
};

struct ClusterMember {
  std::string name;  // "coordinator", "cache-node", "decode-worker", "prefill-worker", "frontend"
  ServiceProcess process;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  std::string frontend_address() const;
  // The frontend's OpenAI-compatible API, "http://127.0.0.1:<port>/v1".
  std::string openai_url() const;
  const std::vector<ClusterMember>& members() const { return members_; }
  // The local etcd member's client address; "" without etcd.
  std::string etcd_endpoint() const { return etcd_ != nullptr ? etcd_->endpoint() : ""; }
  void Stop();

 private:
  LocalCluster() = default;
  std::vector<ClusterMember> members_;
  std::unique_ptr<etcd::EtcdProcess> etcd_;
};

// The directory holding glimpse-coordinator and friends: `bin_dir` if set, else this program's
// directory when they are there, else the build tree layout (<build>/coordinator/...).
std::string ServiceBinary(const std::string& bin_dir, const std::string& name);

}  // namespace glimpse::cli

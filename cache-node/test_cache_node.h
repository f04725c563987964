// A cache node in this process for tests of its callers: the service over RocksDB in a temporary
// directory, its gRPC server on a free loopback port and the loopback transport fabric clients
// join. Test use only.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cache-node/cache_node_grpc.h"
#include "core/cache_client/cache_client.h"
#include "core/common/grpc/server.h"
#include "core/transport/loopback/loopback_transport.h"

namespace glimpse::cache_node::testing {

class TestCacheNode {
 public:
  // Stores under a directory of the test temp dir named after `prefix`, the process and the
  // running gtest test (removed first and again on destruction), so tests never share one.
  static absl::StatusOr<std::unique_ptr<TestCacheNode>> Start(std::string_view prefix);
  ~TestCacheNode();

  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  const std::shared_ptr<transport::LoopbackFabric>& fabric() const { return fabric_; }
  // A client on its own loopback engine of the node's fabric.
  absl::StatusOr<std::unique_ptr<cache_client::CacheClient>> NewClient() const;

 private:
  TestCacheNode() = default;

  std::filesystem::path dir_;
  std::shared_ptr<transport::LoopbackFabric> fabric_;
  std::unique_ptr<CacheNodeService> node_;
  std::unique_ptr<CacheNodeGrpc> adapter_;
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace glimpse::cache_node::testing

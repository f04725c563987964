#include "cache-node/test_cache_node.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/status_macros.h"
#include "gtest/gtest.h"

namespace glimpse::cache_node::testing {

absl::StatusOr<std::unique_ptr<TestCacheNode>> TestCacheNode::Start(std::string_view prefix) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat(std::string(prefix), "_", ::getpid(), "_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::unique_ptr<TestCacheNode> t(new TestCacheNode());
  t->dir_ = dir;
  std::filesystem::remove_all(dir);
  CacheNodeOptions o;
  o.storage.path = dir.string();
  o.storage.sync = false;
  o.retention_sweep_interval = absl::ZeroDuration();
  t->fabric_ = transport::NewLoopbackFabric();
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                   transport::CreateLoopbackTransport(t->fabric_));
  ASSIGN_OR_RETURN(t->node_, CacheNodeService::Create(o, std::move(transport), Clock::Real()));
  t->adapter_ = std::make_unique<CacheNodeGrpc>(t->node_.get());
  ASSIGN_OR_RETURN(t->server_, GrpcServer::Start({}, {t->adapter_.get()}));
  return t;
}

TestCacheNode::~TestCacheNode() {
  if (server_) server_->Shutdown(absl::Now() + absl::Seconds(1));
  if (node_) node_->Stop();
  std::filesystem::remove_all(dir_);
}

absl::StatusOr<std::unique_ptr<cache_client::CacheClient>> TestCacheNode::NewClient() const {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  ASSIGN_OR_RETURN(transports.emplace_back(), transport::CreateLoopbackTransport(fabric_));
  return cache_client::CacheClient::Create({{address()}, {}, absl::Seconds(30)},
                                           std::move(transports));
}

}  // namespace glimpse::cache_node::testing

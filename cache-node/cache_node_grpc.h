// CacheNodeGrpc: the gRPC adapter of CacheNodeService (proto/glimpse/v1/cache_node.proto).
// Translates messages to kvstate types (core/cache_client/proto_convert.h), passes the call's
// deadline on, and maps absl::Status to grpc::Status (core/common/grpc/status.h), code and message
// unchanged. No logic of its own. Thread-safe like the service.
#pragma once

#include "cache-node/cache_node_service.h"
#include "glimpse/v1/cache_node.grpc.pb.h"

namespace glimpse::cache_node {

class CacheNodeGrpc final : public v1::CacheNode::Service {
 public:
  explicit CacheNodeGrpc(CacheNodeService* service) : service_(service) {}  // not owned

  grpc::Status BeginPut(grpc::ServerContext* ctx, const v1::CacheBeginPutRequest* req,
                        v1::CacheBeginPutResponse* resp) override;
  grpc::Status CommitPut(grpc::ServerContext* ctx, const v1::CacheCommitPutRequest* req,
                         v1::CacheCommitPutResponse* resp) override;
  grpc::Status Get(grpc::ServerContext* ctx, const v1::CacheGetRequest* req,
                   v1::CacheGetResponse* resp) override;
  grpc::Status GetMany(grpc::ServerContext* ctx, const v1::CacheGetManyRequest* req,
                       v1::CacheGetManyResponse* resp) override;
  grpc::Status Lookup(grpc::ServerContext* ctx, const v1::CacheLookupRequest* req,
                      v1::CacheLookupResponse* resp) override;
  grpc::Status Pin(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                   v1::CacheEmpty* resp) override;
  grpc::Status Unpin(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                     v1::CacheEmpty* resp) override;
  grpc::Status Delete(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                      v1::CacheEmpty* resp) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const v1::CacheStatsRequest* req,
                     v1::CacheStatsResponse* resp) override;
  grpc::Status Has(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                   v1::CacheHasResponse* resp) override;

 private:
  CacheNodeService* const service_;
};

}  // namespace glimpse::cache_node

// Test helpers for core/common/grpc: an Echo service to serve and a health-check client call.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/grpc/status.h"
#include "grpcpp/client_context.h"
#include "testdata/echo.grpc.pb.h"
#include "testdata/health.grpc.pb.h"

namespace glimpse::grpctest {

class EchoService final : public glimpse::grpctest::Echo::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*, const EchoRequest* request,
                    EchoResponse* response) override {
    response->set_text(request->text());
    return grpc::Status::OK;
  }
};

inline constexpr char kEchoServiceName[] = "glimpse.grpctest.Echo";

inline grpc::ClientContext* WithDeadline(grpc::ClientContext& context) {
  // Generous: only reached when something is broken, and a refused TLS handshake fails fast.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return &context;
}

// grpc.health.v1.Health/Check for `service` ("" is the whole server).
inline absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(WithDeadline(context), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.status();
}

inline absl::StatusOr<std::string> CallEcho(const std::shared_ptr<grpc::Channel>& channel,
                                            const std::string& text) {
  grpc::ClientContext context;
  EchoRequest request;
  request.set_text(text);
  EchoResponse response;
  const grpc::Status status =
      Echo::NewStub(channel)->Echo(WithDeadline(context), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.text();
}

}  // namespace glimpse::grpctest

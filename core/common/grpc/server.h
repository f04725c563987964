// GrpcServer: the one way a Glimpse service serves gRPC. Binds (loopback unless configured
// otherwise), registers the given services plus the standard health service
// (grpc.health.v1.Health; "" and every registered service name report SERVING until Shutdown)
// and, unless turned off, server reflection (which lists every method to whoever connects: off on
// a public endpoint), with TLS when a certificate is configured (mutual TLS when a client CA is
// too). Start fails with a clear error on a port in use or an unreadable certificate file.
//
// ClientChannel makes the matching client side: plaintext, or TLS verifying the server against a
// CA file (and presenting a client certificate for mutual TLS). Its channels ping the server every
// kKeepaliveInterval while calls are in flight, so a peer that vanishes without closing the
// connection fails those calls (UNAVAILABLE) within about two intervals; servers accept the pings.
// Servers Glimpse did not write may not: etcd closes a connection pinged more often than its
// --grpc-keepalive-min-time (5 s by default), so etcd's channels ping every kEtcdKeepaliveInterval.
// A channel that lost its peer tries to reconnect at most kMaxReconnectBackoff apart (gRPC's
// default grows to 2 minutes), so a restarted peer (a coordinator, an etcd member) is reached
// again within seconds; until then calls on it fail at once, as UNAVAILABLE.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/server.h"

namespace glimpse {

inline constexpr absl::Duration kKeepaliveInterval = absl::Seconds(2);
inline constexpr absl::Duration kEtcdKeepaliveInterval = absl::Seconds(10);
inline constexpr absl::Duration kInitialReconnectBackoff = absl::Milliseconds(250);
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(2);

struct TlsFiles {
  std::string cert_file;  // PEM; empty: plaintext
  std::string key_file;   // PEM
  std::string ca_file;    // server: client CA (set: clients must present a certificate);
                          // client: CA that signed the server's certificate
  // Client: the name the server's certificate must carry; empty: the address's host. A cluster
  // whose nodes register pod IPs gives every certificate one shared DNS name instead.
  std::string server_name;
};

struct GrpcServerOptions {
  std::string address = "127.0.0.1:0";  // host:port; port 0 picks a free one (see port())
  TlsFiles tls;
  int64_t max_receive_message_bytes = int64_t{64} << 20;
  // Bounds on what callers can make the server hold: threads serving calls (gRPC's resource
  // quota; a call that finds none gets RESOURCE_EXHAUSTED at once) and concurrent streams per
  // connection (HTTP/2 SETTINGS; a client queues beyond it).
  int max_threads = 256;
  int max_concurrent_streams = 128;
  bool reflection = true;
};

class GrpcServer {
 public:
  // `services` are not owned and must outlive the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const GrpcServerOptions& options, const std::vector<grpc::Service*>& services);
  ~GrpcServer();  // Shutdown(now) if not done

  int port() const { return port_; }
  // A channel to this server inside the process (no socket, no TLS; the server's own checks,
  // authentication included, still run): for a service's second front door, e.g. the frontend's
  // HTTP API. Valid until Shutdown.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // Sets the health of "" and every registered service (SERVING at start). No effect after
  // Shutdown.
  void SetServing(bool serving);
  // Marks every service NOT_SERVING, stops accepting, lets in-flight calls finish until
  // `deadline`, then cancels the rest. Idempotent.
  void Shutdown(absl::Time deadline);

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, int port, std::vector<std::string> names);
  std::unique_ptr<grpc::Server> server_;
  int port_;
  const std::vector<std::string> names_;  // the registered services
  std::atomic<bool> shut_down_{false};    // SetServing may come from any thread
};

// A channel to `address`: plaintext when tls.ca_file is empty, else TLS (with the client
// certificate when tls.cert_file is set), pinging every `keepalive` while calls are in flight.
// Errors name an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ClientChannel(
    const std::string& address, const TlsFiles& tls = {},
    absl::Duration keepalive = kKeepaliveInterval);

}  // namespace glimpse

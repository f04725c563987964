// Shared by the UCX transport tests: the transport sets under test, selected the way a
// deployment selects them — UCX_TLS in the environment before ucp_config_read.
#pragma once

#include <cstdlib>
#include <string>

#include "core/transport/transport.h"
#include "gtest/gtest.h"

namespace glimpse::transport {

struct TlsCase {
  const char* name;
  const char* tls;
  bool detects_peer_failure;  // false: UCX 1.13 shm only, needs allow_no_peer_failure_detection
};
// shm: pure shared memory (posix/sysv active messages, CMA bulk). shm_tcp: what the services run
// with; engines in one process, or two on one host, reach each other through shared memory
// without UCX error handling (UcxOptions::local_shared_memory). tcp: sockets only, with UCX's peer
// failure detection.
inline constexpr TlsCase kTlsCases[] = {{"shm", "posix,sysv,cma,self", false},
                                        {"shm_tcp", "posix,sysv,cma,tcp,self", true},
                                        {"tcp", "tcp,self", true}};
inline constexpr char kAllowEnv[] = "GLIMPSE_TRANSPORT_ALLOW_NO_PEER_FAILURE_DETECTION";

class UcxTlsTest : public ::testing::TestWithParam<TlsCase> {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", GetParam().tls, 1);
    setenv(kAllowEnv, GetParam().detects_peer_failure ? "0" : "1", 1);  // for child processes
  }
};

inline UcxOptions TestOptions(const TlsCase& c) {
  UcxOptions o;
  o.allow_no_peer_failure_detection = !c.detects_peer_failure;
  return o;
}

inline std::string TlsName(const ::testing::TestParamInfo<TlsCase>& info) {
  return info.param.name;
}

}  // namespace glimpse::transport

// main() of glimpse_transport_ucx_test: gtest's, after routing UCX's own log away from stdout.
//
// UCX logs to stdout by default, where it would mix with gtest's output (which ctest's test
// discovery parses) and with glimpse_transport_peer's line protocol. libucs reads UCX_LOG_FILE and
// UCX_LOG_LEVEL when it is loaded, before main(), so the first run sets them (only where the
// caller has not) and re-executes itself once; child peers inherit them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  if (std::getenv("UCX_LOG_FILE") == nullptr) {
    setenv("UCX_LOG_FILE", "stderr", 1);
    setenv("UCX_LOG_LEVEL", "error", 0);
    execv("/proc/self/exe", argv);
    std::perror("re-exec with UCX_LOG_FILE=stderr failed; UCX may log to stdout");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

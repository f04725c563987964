#include "core/transport/ucx/ucx_locality.h"

#include "gtest/gtest.h"

namespace glimpse::transport::ucx_locality {
namespace {

TEST(UcxLocality, HostKeyIsStableAndNonzero) {
  EXPECT_NE(LocalHostKey(), 0u);
  EXPECT_EQ(LocalHostKey(), LocalHostKey());
}

TEST(UcxLocality, TlsWithSharedMemory) {
  EXPECT_TRUE(TlsHasSharedMemory(nullptr));  // unset: UCX takes every transport
  EXPECT_TRUE(TlsHasSharedMemory("all"));
  EXPECT_TRUE(TlsHasSharedMemory("posix,sysv,cma,tcp,self"));
  EXPECT_TRUE(TlsHasSharedMemory("sysv,tcp"));
  EXPECT_TRUE(TlsHasSharedMemory("sm,tcp"));
  EXPECT_TRUE(TlsHasSharedMemory("shm,self"));
  EXPECT_TRUE(TlsHasSharedMemory("^tcp"));
  EXPECT_TRUE(TlsHasSharedMemory("^posix"));  // sysv is left
}

TEST(UcxLocality, TlsWithoutSharedMemory) {
  EXPECT_FALSE(TlsHasSharedMemory(""));
  EXPECT_FALSE(TlsHasSharedMemory("tcp,self"));
  EXPECT_FALSE(TlsHasSharedMemory("cma,tcp"));  // CMA moves bulk data, not active messages
  EXPECT_FALSE(TlsHasSharedMemory("rc,ud,self"));
  EXPECT_FALSE(TlsHasSharedMemory("^sm"));
  EXPECT_FALSE(TlsHasSharedMemory("^posix,sysv"));
}

}  // namespace
}  // namespace glimpse::transport::ucx_locality

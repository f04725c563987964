#include "core/transport/ucx/ucx_buffer_pool.h"

#include "gtest/gtest.h"

namespace glimpse::transport::ucx_internal {
namespace {

// Last in, first out per size: the buffer returned last (likeliest still cached) comes back first.
TEST(BufferPool, RecyclesBySizeLastInFirstOut) {
  BufferPool pool(1 << 20);
  PooledBuffer a = pool.Get(4096), b = pool.Get(4096), c = pool.Get(100);
  ASSERT_NE(a.data, nullptr);
  ASSERT_NE(b.data, nullptr);
  const uint8_t* pa = a.data.get();
  const uint8_t* pb = b.data.get();
  const uint8_t* pc = c.data.get();
  pool.Put(std::move(a));
  pool.Put(std::move(c));
  pool.Put(std::move(b));
  EXPECT_EQ(pool.Get(4096).data.get(), pb);
  EXPECT_EQ(pool.Get(4096).data.get(), pa);
  EXPECT_EQ(pool.Get(100).data.get(), pc);
  PooledBuffer fresh = pool.Get(4096);
  EXPECT_NE(fresh.data, nullptr);
  EXPECT_EQ(fresh.size, 4096u);
}

TEST(BufferPool, KeepsAtMostItsCapacity) {
  BufferPool pool(6000);
  PooledBuffer a = pool.Get(4096), b = pool.Get(4096);
  const uint8_t* pa = a.data.get();
  pool.Put(std::move(a));
  pool.Put(std::move(b));  // 8192 > 6000: freed, not kept
  EXPECT_EQ(pool.Get(4096).data.get(), pa);
  PooledBuffer c = pool.Get(4096);  // the pool is empty again: a new allocation
  EXPECT_NE(c.data.get(), nullptr);
}

}  // namespace
}  // namespace glimpse::transport::ucx_internal

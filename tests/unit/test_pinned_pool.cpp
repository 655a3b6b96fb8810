// The pinned host pool on the CPU, over the fake backend: size classes, reuse of freed blocks,
// stream-ordered reuse, and running out of pinned memory. The pool is part of the memory module's
// CUDA edge, so these tests are not in a host-only build.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/memory/pinned_pool.hpp"

using namespace gpu_basics;

namespace {
constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
}  // namespace

TEST(PinnedPool, SizeClassesWasteAtMostAnEighth) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    const std::size_t n = 4097 + rng() % (std::size_t{1} << 34);
    const std::size_t c = pinned_size_class(n);
    ASSERT_GE(c, n);
    ASSERT_LE(static_cast<double>(c - n), 0.125 * static_cast<double>(n)) << n;
  }
  EXPECT_EQ(pinned_size_class(1), 4096u);
  EXPECT_EQ(pinned_size_class(1 * MiB), 1 * MiB);
  EXPECT_EQ(pinned_size_class(1 * MiB + 1), 1 * MiB + 128 * KiB);
  EXPECT_EQ(pinned_size_class(1 * GiB + 1), 1 * GiB + 128 * MiB);  // PyTorch would pin 2 GiB
}

TEST(PinnedPool, ReusesFreedBlocksAndDefersStreamUse) {
  auto be = std::make_shared<fake_backend>(1 * GiB);
  pinned_host_pool pool(be);
  void* a = pool.allocate(3 * MiB);
  pool.deallocate(a);
  void* b = pool.allocate(3 * MiB - 100);  // same class
  EXPECT_EQ(b, a);
  auto s = pool.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.backend_allocations, 1);
  EXPECT_GE(s.pin_seconds, 0.0);
  pool.record_stream(b, 9);
  pool.deallocate(b);
  void* c = pool.allocate(3 * MiB);
  EXPECT_NE(c, a);  // the copy on stream 9 may still read a
  be->complete_stream(9);
  void* d = pool.allocate(3 * MiB);
  EXPECT_EQ(d, a);
  pool.deallocate(c);
  pool.deallocate(d);
  EXPECT_EQ(pool.empty_cache(), 2 * pinned_size_class(3 * MiB));
  s = pool.stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.backend_frees, 2);
  EXPECT_EQ(be->used(), 0u);
  EXPECT_THROW(pool.deallocate(a), logic_error);
}

TEST(PinnedPool, OutOfPinnedMemoryFreesTheCacheThenThrows) {
  auto be = std::make_shared<fake_backend>(10 * MiB);
  pinned_host_pool pool(be);
  void* a = pool.allocate(6 * MiB);
  pool.deallocate(a);
  void* b = pool.allocate(8 * MiB);  // needs the cached 6 MiB unpinned first
  EXPECT_NE(b, nullptr);
  EXPECT_THROW((void)pool.allocate(8 * MiB), out_of_memory);
  pool.deallocate(b);
}

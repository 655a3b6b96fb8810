// Block placement on the CPU: freed blocks merge with their neighbours at once, oversize blocks
// follow max_split_size, garbage collection returns the oldest blocks past its threshold,
// and the stress invariants of one thread.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

using namespace gpu_basics;
using namespace gpu_basics::test_util;

TEST(AllocatorV2, FreedBlocksMergeAtOnce) {
  // The case deferred merging got wrong: two neighbours freed, then a request for both of them
  // together must take the merged block instead of a new segment.
  allocator_options o;
  o.thread_cache_blocks = 0;
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be, o);
  void* x = a.allocate(8 * MiB);  // 20 MiB segment: x, y, rest
  void* y = a.allocate(8 * MiB);
  a.deallocate(x);
  a.deallocate(y);  // merges with x and the 4 MiB tail: the segment is whole again
  void* z = a.allocate(16 * MiB);
  EXPECT_EQ(addr(z), addr(x));
  EXPECT_EQ(be->allocations(), 1u);
  a.deallocate(z);
}

TEST(AllocatorV2, OversizeBlocksFollowMaxSplitSize) {
  allocator_options o;
  o.max_split_size = 64 * MiB;
  o.thread_cache_blocks = 0;
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be, o);
  void* big = a.allocate(100 * MiB);
  a.deallocate(big);
  void* small = a.allocate(4 * MiB);  // may not take the 100 MiB block: a new 20 MiB segment
  EXPECT_NE(addr(small), addr(big));
  void* large = a.allocate(90 * MiB);  // wastes 10 MiB < 20 MiB: takes it, unsplit
  EXPECT_EQ(addr(large), addr(big));
  EXPECT_EQ(a.block_size(large), 100 * MiB);
  a.deallocate(large);
  void* larger = a.allocate(70 * MiB);  // would waste 30 MiB: a segment of its own
  EXPECT_NE(addr(larger), addr(big));
  EXPECT_EQ(be->allocations(), 3u);
  a.deallocate(small);
  a.deallocate(larger);
}

TEST(AllocatorV2, GarbageCollectionReturnsTheOldestBlocksPastTheThreshold) {
  allocator_options o;
  o.reserved_limit = 200 * MiB;
  o.garbage_collection_threshold = 0.3;  // collect above 60 MiB reserved
  o.thread_cache_blocks = 0;
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be, o);
  void* old1 = a.allocate(40 * MiB);
  void* old2 = a.allocate(40 * MiB);
  a.deallocate(old1);
  a.deallocate(old2);
  // Lookups age the free blocks; old1 serves the 30 MiB requests (best fit) and stays young.
  for (int i = 0; i < 10; ++i) a.deallocate(a.allocate(30 * MiB));
  EXPECT_EQ(be->used(), 80 * MiB);
  // 80 MiB reserved > 60: before a new segment, blocks older than the average go (old2 alone
  // brings it back under), then 50 MiB are added.
  void* fresh = a.allocate(50 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<std::int64_t>(50 * MiB + 40 * MiB));
  a.deallocate(fresh);
  o.garbage_collection_threshold = 0;  // the same without collection keeps everything
  caching_allocator b(std::make_shared<fake_backend>(1 * GiB, true), o);
  void* c1 = b.allocate(40 * MiB);
  void* c2 = b.allocate(40 * MiB);
  b.deallocate(c1);
  b.deallocate(c2);
  void* c3 = b.allocate(50 * MiB);
  EXPECT_EQ(b.stats().reserved_bytes.current, static_cast<std::int64_t>(130 * MiB));
  b.deallocate(c3);
}

TEST(AllocatorV2, MemoryFractionLimitsReservedToItsShareOfTheDevice) {
  // per_process_memory_fraction:0.25 of a 400 MiB device: a 100 MiB reserved limit, with
  // PyTorch's path at the limit (free the cache, retry, then out of memory); without a fraction
  // the threshold never collects.
  auto o =
      parse_allocator_options("per_process_memory_fraction:0.25,garbage_collection_threshold:0.5");
  o.thread_cache_blocks = 0;
  auto be = std::make_shared<fake_backend>(400 * MiB, true);
  caching_allocator a(be, o);
  EXPECT_EQ(a.options().reserved_limit, 100 * MiB);
  void* x = a.allocate(60 * MiB);
  a.deallocate(x);
  void* y = a.allocate(70 * MiB);  // 60 cached + 70 > 100: the cache goes first
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<std::int64_t>(70 * MiB));
  EXPECT_THROW((void)a.allocate(40 * MiB), out_of_memory);
  a.deallocate(y);
  auto bare = parse_allocator_options("garbage_collection_threshold:0.5");
  bare.thread_cache_blocks = 0;
  caching_allocator b(std::make_shared<fake_backend>(400 * MiB, true), bare);
  EXPECT_EQ(b.options().reserved_limit, SIZE_MAX);
  b.deallocate(b.allocate(60 * MiB));
  void* z = b.allocate(70 * MiB);
  EXPECT_EQ(b.stats().reserved_bytes.current, static_cast<std::int64_t>(130 * MiB));
  b.deallocate(z);
}

TEST(AllocatorV2, StressOneThreadKeepsInvariants) {
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, true);
  for (bool expandable : {false, true}) {
    allocator_options o;
    o.expandable_segments = expandable;
    caching_allocator a(be, o);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> log_size(std::log(512.0), std::log(32.0 * MiB));
    test_util::live_blocks live;
    std::vector<std::uintptr_t> order;
    for (int op = 0; op < 100000; ++op) {
      const auto r = rng() % 100;
      if (r < 50 || order.empty()) {
        const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
        void* p = a.allocate(bytes, 1 + rng() % 3);
        ASSERT_TRUE(live.emplace(addr(p), test_util::live_block{a.block_size(p), bytes}).second);
        order.push_back(addr(p));
      } else if (r < 97) {
        const std::size_t i = rng() % order.size();
        const std::uintptr_t p = order[i];
        order[i] = order.back();
        order.pop_back();
        if (rng() % 8 == 0) a.record_stream(reinterpret_cast<void*>(p), 1 + rng() % 3);
        a.deallocate(reinterpret_cast<void*>(p));
        live.erase(p);
      } else if (r < 99) {
        be->complete_stream(1 + rng() % 3);
      } else {
        (void)a.empty_cache();
      }
      if (op % 997 == 0) {
        ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, live));
      }
    }
    for (auto p : order) a.deallocate(reinterpret_cast<void*>(p));
    live.clear();
    be->synchronize();
    (void)a.empty_cache();
    ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, live));
    EXPECT_EQ(be->used(), 0u) << expandable;
  }
  EXPECT_EQ(be->bad_deallocations(), 0u);
}

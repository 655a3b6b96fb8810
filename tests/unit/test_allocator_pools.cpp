// The allocator's counters per pool (PyTorch's small_pool and large_pool), on the CPU over the
// fake backend: a request counts in the pool its size chooses, the pools add up to both at every
// step of a random run on two streams (plain and expandable segments, thread caches on), peaks
// are per pool, and reset_peak_stats resets them too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator_test_util.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

using namespace gpu_basics;
using namespace gpu_basics::test_util;

namespace {

allocator_options with_expandable(bool on) {
  allocator_options o;
  o.expandable_segments = on;
  return o;
}

/// Bytes of the segments (or mapped runs of expandable ranges) of one pool, from segments().
std::int64_t segment_bytes(const caching_allocator& a, bool small) {
  std::int64_t n = 0;
  for (const segment_view& s : a.segments())
    if (s.small == small) n += static_cast<std::int64_t>(s.total_size);
  return n;
}

class AllocatorPools : public ::testing::TestWithParam<bool> {};

}  // namespace

TEST_P(AllocatorPools, A512ByteRequestIsSmallAndA4MiBOneIsLarge) {
  auto be = std::make_shared<fake_backend>(1 * GiB, /*fake_addresses=*/true);
  caching_allocator a(be, with_expandable(GetParam()));
  void* p = a.allocate(512);
  auto s = a.stats();
  EXPECT_EQ(s.small_pool.allocated_bytes.current, 512);
  EXPECT_EQ(s.small_pool.requested_bytes.current, 512);
  EXPECT_EQ(s.small_pool.allocation_count.current, 1);
  EXPECT_EQ(s.small_pool.active_count.current, 1);
  EXPECT_EQ(s.small_pool.segment_count.current, 1);
  EXPECT_EQ(s.small_pool.reserved_bytes.current, segment_bytes(a, true));
  EXPECT_GT(s.small_pool.reserved_bytes.current, 0);
  EXPECT_EQ(s.large_pool, pool_stats{});  // nothing large yet
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));

  void* q = a.allocate(4 * MiB);
  s = a.stats();
  EXPECT_EQ(s.large_pool.allocated_bytes.current, static_cast<std::int64_t>(a.block_size(q)));
  EXPECT_EQ(s.large_pool.requested_bytes.current, static_cast<std::int64_t>(4 * MiB));
  EXPECT_EQ(s.large_pool.allocation_count.current, 1);
  EXPECT_EQ(s.large_pool.segment_count.current, 1);
  EXPECT_EQ(s.large_pool.reserved_bytes.current, segment_bytes(a, false));
  EXPECT_GT(s.large_pool.reserved_bytes.current, 0);
  EXPECT_EQ(s.small_pool.allocated_bytes.current, 512);  // unchanged
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));

  a.deallocate(p);
  a.deallocate(q);
  s = a.stats();
  EXPECT_EQ(s.small_pool.allocated_bytes.current, 0);
  EXPECT_EQ(s.small_pool.allocated_bytes.freed, 512);
  EXPECT_EQ(s.large_pool.allocated_bytes.current, 0);
  EXPECT_EQ(s.large_pool.allocation_count.freed, 1);
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));
  (void)a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.small_pool.reserved_bytes.current, 0);
  EXPECT_EQ(s.large_pool.reserved_bytes.current, 0);
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));
}

// A random mix of small and large requests on two streams, with record_stream, stream
// completions and empty_cache: at every step each pool's allocated, requested and count equal
// a shadow of its live blocks (the pool chosen by the request's size), its reserved bytes equal
// its segments', its peak the highest its shadow reached, and the pools add up to both.
TEST_P(AllocatorPools, PoolsAddUpToBothAtEveryStepOfARandomRunOnTwoStreams) {
  auto be = std::make_shared<fake_backend>(64 * GiB, /*fake_addresses=*/true);
  caching_allocator a(be, with_expandable(GetParam()));
  std::mt19937_64 rng(44);
  struct live {
    std::size_t size, requested;
    bool small;
  };
  std::map<std::uintptr_t, live> blocks;
  std::map<std::uintptr_t, stream_handle> stream_of;
  std::int64_t bytes[2] = {}, requested[2] = {}, count[2] = {}, peak[2] = {};
  std::int64_t small_seen = 0, large_seen = 0, peak_both = 0;
  for (int step = 0; step < 3000; ++step) {
    const auto r = rng() % 100;
    if (r < 42 || blocks.empty()) {
      const bool want_small = rng() % 2;
      const std::size_t n = want_small ? 1 + rng() % (1 * MiB)              // up to 1 MiB
                                       : 1 * MiB + 1 + rng() % (40 * MiB);  // above it
      const stream_handle s = 1 + rng() % 2;
      void* p = a.allocate(n, s);
      const bool small = is_small_request(round_request(n));
      ASSERT_EQ(small, want_small) << n;
      const std::size_t size = a.block_size(p);
      blocks[addr(p)] = {size, n, small};
      stream_of[addr(p)] = s;
      bytes[small] += static_cast<std::int64_t>(size);
      requested[small] += static_cast<std::int64_t>(n);
      ++count[small];
      peak[small] = std::max(peak[small], bytes[small]);
      (small ? small_seen : large_seen) += 1;
    } else if (r < 52) {  // free a block and ask for its size again at once: a small one
                          // comes back through the freeing thread's cache (no stats() between)
      auto it = blocks.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % blocks.size()));
      const live b = it->second;
      const stream_handle s = stream_of[it->first];
      a.deallocate(reinterpret_cast<void*>(it->first));
      stream_of.erase(it->first);
      blocks.erase(it);
      void* p = a.allocate(b.requested, s);
      blocks[addr(p)] = {a.block_size(p), b.requested, b.small};
      stream_of[addr(p)] = s;
      bytes[b.small] +=
          static_cast<std::int64_t>(blocks[addr(p)].size) - static_cast<std::int64_t>(b.size);
      peak[b.small] = std::max(peak[b.small], bytes[b.small]);
    } else if (r < 95) {
      auto it = blocks.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % blocks.size()));
      const live b = it->second;
      void* p = reinterpret_cast<void*>(it->first);
      if (rng() % 6 == 0) a.record_stream(p, 3 + rng() % 2);  // used on stream 3 or 4
      stream_of.erase(it->first);
      blocks.erase(it);
      a.deallocate(p);
      bytes[b.small] -= static_cast<std::int64_t>(b.size);
      requested[b.small] -= static_cast<std::int64_t>(b.requested);
      --count[b.small];
    } else if (r < 98) {
      be->complete_stream(3 + rng() % 2);
    } else {
      (void)a.empty_cache();
    }
    peak_both = std::max(peak_both, bytes[0] + bytes[1]);
    const auto s = a.stats();
    ASSERT_NO_FATAL_FAILURE(check_pool_sums(s)) << "step " << step;
    for (const bool small : {false, true}) {
      const pool_stats& p = small ? s.small_pool : s.large_pool;
      ASSERT_EQ(p.allocated_bytes.current, bytes[small]) << step << " small " << small;
      ASSERT_EQ(p.requested_bytes.current, requested[small]) << step;
      ASSERT_EQ(p.allocation_count.current, count[small]) << step;
      ASSERT_EQ(p.allocated_bytes.peak, peak[small]) << step;
      ASSERT_EQ(p.reserved_bytes.current, segment_bytes(a, small)) << step;
      ASSERT_GE(p.active_bytes.current, p.allocated_bytes.current) << step;
    }
  }
  EXPECT_GT(small_seen, 500);
  EXPECT_GT(large_seen, 500);
  const auto s = a.stats();
  EXPECT_GT(s.small_pool.segment_count.allocated, 0);
  EXPECT_GT(s.large_pool.segment_count.allocated, 0);
  EXPECT_GT(
      s.large_pool.inactive_split_count.allocated + s.small_pool.inactive_split_count.allocated, 0);
  EXPECT_EQ(s.allocated_bytes.peak, peak_both);
  EXPECT_LT(peak_both, peak[0] + peak[1]);  // the pools peaked at different times
}

TEST_P(AllocatorPools, BlocksServedByAThreadsOwnCacheCountInTheSmallPool) {
  auto be = std::make_shared<fake_backend>(1 * GiB, /*fake_addresses=*/true);
  caching_allocator a(be, with_expandable(GetParam()));
  void* keep = a.allocate(8 * MiB);  // something large, so the pools differ
  void* p = a.allocate(4 * KiB);
  for (int i = 0; i < 5; ++i) {  // freed to this thread's cache and taken back from it
    a.deallocate(p);
    void* q = a.allocate(4 * KiB);
    ASSERT_EQ(q, p);
  }
  void* r = a.allocate(4 * KiB);
  const auto s = a.stats();
  EXPECT_EQ(s.small_pool.allocated_bytes.current, static_cast<std::int64_t>(8 * KiB));
  EXPECT_EQ(s.small_pool.allocation_count.allocated, 7);
  EXPECT_EQ(s.small_pool.allocation_count.freed, 5);
  EXPECT_EQ(s.small_pool.active_count.current, 2);
  EXPECT_EQ(s.small_pool.requested_bytes.peak, static_cast<std::int64_t>(8 * KiB));
  EXPECT_EQ(s.large_pool.allocation_count.allocated, 1);
  EXPECT_EQ(s.large_pool.allocated_bytes.freed, 0);
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));
  a.deallocate(r);
  a.deallocate(p);
  a.deallocate(keep);
}

TEST_P(AllocatorPools, PeaksArePerPoolAndResetPeakResetsThem) {
  auto be = std::make_shared<fake_backend>(1 * GiB, /*fake_addresses=*/true);
  caching_allocator a(be, with_expandable(GetParam()));
  std::vector<void*> small;
  for (int i = 0; i < 3; ++i) small.push_back(a.allocate(256 * KiB));
  for (void* p : small) a.deallocate(p);
  void* big = a.allocate(8 * MiB);
  a.deallocate(big);
  auto s = a.stats();
  EXPECT_EQ(s.small_pool.allocated_bytes.peak, static_cast<std::int64_t>(3 * 256 * KiB));
  EXPECT_EQ(s.large_pool.allocated_bytes.peak, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<std::int64_t>(8 * MiB));  // never both at once
  EXPECT_EQ(s.small_pool.allocation_count.peak, 3);
  EXPECT_EQ(s.large_pool.allocation_count.peak, 1);

  void* keep = a.allocate(1024);  // through the thread cache: still the small pool's
  a.reset_peak_stats();
  s = a.stats();
  for (const pool_stats& p : {static_cast<const pool_stats&>(s), s.small_pool, s.large_pool}) {
    EXPECT_EQ(p.allocated_bytes.peak, p.allocated_bytes.current);
    EXPECT_EQ(p.reserved_bytes.peak, p.reserved_bytes.current);
    EXPECT_EQ(p.allocation_count.peak, p.allocation_count.current);
    EXPECT_EQ(p.active_bytes.peak, p.active_bytes.current);
    EXPECT_EQ(p.segment_count.peak, p.segment_count.current);
  }
  EXPECT_EQ(s.small_pool.allocated_bytes.peak, 1024);
  EXPECT_EQ(s.large_pool.allocated_bytes.peak, 0);
  void* again = a.allocate(2 * MiB);
  a.deallocate(again);
  s = a.stats();
  EXPECT_EQ(s.large_pool.allocated_bytes.peak, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.small_pool.allocated_bytes.peak, 1024);
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<std::int64_t>(2 * MiB + 1024));
  a.deallocate(keep);
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(a.stats()));
}

TEST(AllocatorPoolsJson, PoolsAreWrittenApartFromTheResultsFilesKeys) {
  auto be = std::make_shared<fake_backend>(1 * GiB, /*fake_addresses=*/true);
  caching_allocator a(be);
  void* p = a.allocate(512);
  const auto s = a.stats();
  const nlohmann::json all = s;
  EXPECT_FALSE(all.contains("small_pool"));  // results files keep their keys
  EXPECT_EQ(all["allocated_bytes"]["current"], 512);
  const nlohmann::json small = s.small_pool;
  EXPECT_EQ(small["allocated_bytes"]["current"], 512);
  EXPECT_EQ(small.size(), 9u);
  EXPECT_EQ(nlohmann::json(s.large_pool)["segment_count"]["current"], 0);
  a.deallocate(p);
}

INSTANTIATE_TEST_SUITE_P(PlainAndExpandable, AllocatorPools, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "expandable" : "plain";
                         });

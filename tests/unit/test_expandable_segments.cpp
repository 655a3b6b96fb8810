// Expandable segments on the CPU, over the fake backend's virtual memory: ranges that grow and
// shrink in pages, the page release policies (keep, eager, deferred), every byte in use backed by
// memory, unmapping before running out of memory, the fallback to plain segments without virtual
// memory, and the stress invariants with 8 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"

using namespace gpu_basics;
using namespace gpu_basics::test_util;

TEST(AllocatorV2, ExpandableSegmentsGrowInPagesAndShrinkOnEmptyCache) {
  allocator_options o;
  o.expandable_segments = true;
  o.history_capacity = 1000;
  auto be = std::make_shared<fake_backend>(4 * GiB);  // real addresses: pages are touched
  caching_allocator a(be, o);
  void* p = a.allocate(30 * MiB);  // large pool: 20 MiB pages, two mapped
  EXPECT_EQ(be->mapped(), 40 * MiB);
  std::memset(p, 0x5a, 30 * MiB);
  void* q = a.allocate(5 * MiB);  // fits in the 10 MiB left of the mapped pages
  EXPECT_EQ(addr(q), addr(p) + 30 * MiB);
  EXPECT_EQ(be->mapped(), 40 * MiB);
  void* r = a.allocate(30 * MiB);  // the range grows: right after q, 2 more pages
  EXPECT_EQ(addr(r), addr(q) + 5 * MiB);
  EXPECT_EQ(be->mapped(), 80 * MiB);
  std::memset(r, 0xa5, 30 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[30 * MiB - 1], 0x5a);
  auto s = a.stats();
  EXPECT_EQ(static_cast<std::size_t>(s.reserved_bytes.current), be->used());
  // Freeing the middle and the end, then empty_cache: the whole free pages go back, pages
  // holding part of a live block stay.
  a.deallocate(q);
  a.deallocate(r);
  const auto rep = a.empty_cache();
  EXPECT_EQ(be->mapped(), 40 * MiB);  // p's 30 MiB spans two pages
  EXPECT_EQ(rep.released_bytes, 40 * MiB);
  EXPECT_EQ(static_cast<std::size_t>(a.stats().reserved_bytes.current), 40 * MiB);
  void* again = a.allocate(30 * MiB);  // remaps from the end of p's pages
  EXPECT_EQ(addr(again), addr(p) + 30 * MiB);
  std::memset(again, 1, 30 * MiB);
  a.deallocate(again);
  a.deallocate(p);
  (void)a.empty_cache();
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
  std::size_t maps = 0, unmaps = 0;
  for (const auto& e : a.history()) {
    maps += e.kind == history_kind::segment_map;
    unmaps += e.kind == history_kind::segment_unmap;
  }
  EXPECT_GE(maps, 3u);
  EXPECT_GE(unmaps, 2u);
}

TEST(AllocatorV2, ExpandableSegmentsGiveFreePagesBackBeforeReservingMore) {
  allocator_options o;
  o.expandable_segments = true;
  o.release_pages = page_release::eager;
  auto be = std::make_shared<fake_backend>(4 * GiB);  // real addresses: pages are touched
  caching_allocator a(be, o);
  void* x = a.allocate(40 * MiB);  // large pool, 20 MiB pages: x and y take four
  void* y = a.allocate(40 * MiB);
  std::memset(y, 0x3c, 40 * MiB);
  a.deallocate(x);  // x's two pages stay mapped: nothing needs more memory yet
  EXPECT_EQ(be->mapped(), 80 * MiB);
  // z goes where PyTorch puts it, after y (x's 40 MiB are too small); its three pages would take
  // reserved past its highest mark, so x's two free pages go back first.
  void* z = a.allocate(60 * MiB);
  EXPECT_EQ(addr(z), addr(y) + 40 * MiB);
  EXPECT_EQ(be->mapped(), 100 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<std::int64_t>(100 * MiB));
  std::memset(z, 0x7e, 60 * MiB);
  // x's place, without memory now, serves the next request of its size: its pages come back.
  void* w = a.allocate(40 * MiB);
  EXPECT_EQ(w, x);
  EXPECT_EQ(be->mapped(), 140 * MiB);
  std::memset(w, 0x11, 40 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(y)[40 * MiB - 1], 0x3c);
  EXPECT_EQ(static_cast<unsigned char*>(z)[0], 0x7e);
  // Snapshot segments hold only pages with memory behind them.
  a.deallocate(w);
  void* v = a.allocate(100 * MiB);  // after z: 100 more MiB, past the mark: w's pages go back
  EXPECT_EQ(addr(v), addr(z) + 60 * MiB);
  std::size_t listed = 0;
  for (const auto& sv : a.segments()) listed += sv.total_size;
  EXPECT_EQ(listed, be->mapped());
  EXPECT_EQ(be->mapped(), 200 * MiB);
  for (void* p : {y, z, v}) a.deallocate(p);
  (void)a.empty_cache();
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}

TEST(AllocatorV2, DeferredPageReleaseWaitsForTheStreamAndKeepsPagesTakenBack) {
  // The default release: pages of freed blocks are retired with an event on their stream and
  // unmapped only once it is done; a retired page that a new block needs before then keeps its
  // memory (no unmap, no map), and that block's data survives the old event completing.
  allocator_options o;
  o.expandable_segments = true;
  o.release_pages = page_release::deferred;
  auto be = std::make_shared<fake_backend>(4 * GiB);  // real addresses: pages are touched
  caching_allocator a(be, o);
  void* x = a.allocate(40 * MiB);  // large pool, 20 MiB pages: x and y take four
  void* y = a.allocate(40 * MiB);
  std::memset(x, 0x11, 40 * MiB);
  std::memset(y, 0x3c, 40 * MiB);
  a.deallocate(x);
  // z would take reserved past its mark: x's two pages retire, but the stream has not run.
  void* z = a.allocate(60 * MiB);
  EXPECT_EQ(addr(z), addr(y) + 40 * MiB);
  EXPECT_EQ(be->mapped(), 140 * MiB);
  EXPECT_EQ(a.stats().pages_retired, 2);
  EXPECT_EQ(static_cast<std::size_t>(a.stats().reserved_bytes.current), be->mapped());
  std::memset(z, 0x7e, 60 * MiB);
  // x's place serves the next request of its size: its retired pages are taken back as they are.
  const std::size_t maps = be->maps();
  void* w = a.allocate(40 * MiB);
  EXPECT_EQ(w, x);
  EXPECT_EQ(be->maps(), maps);
  EXPECT_EQ(a.stats().pages_reclaimed, 2);
  std::memset(w, 0x22, 40 * MiB);
  // The stream runs; the next allocator call polls the old retirement: w's pages stay.
  be->complete_stream(0);
  void* small = a.allocate(3 * MiB);
  EXPECT_EQ(be->mapped(), 160 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(w)[40 * MiB - 1], 0x22);
  // Freed again and retired again, they go once the stream is done.
  a.deallocate(w);
  void* v = a.allocate(100 * MiB);  // past the mark: w's pages retire
  EXPECT_EQ(be->mapped(), 260 * MiB);
  be->complete_stream(0);
  // Any call that reaches the shared cache polls. (A large request here would take w's place
  // back: PyTorch's best fit avoids the free block at a range's growing end.)
  void* other = a.allocate(512, 1);  // stream 1's first small page: 2 MiB
  EXPECT_EQ(be->mapped(), 222 * MiB);
  EXPECT_EQ(static_cast<std::size_t>(a.stats().reserved_bytes.current), be->mapped());
  EXPECT_EQ(static_cast<unsigned char*>(y)[0], 0x3c);
  EXPECT_EQ(static_cast<unsigned char*>(z)[60 * MiB - 1], 0x7e);
  for (void* p : {y, z, v, small, other}) a.deallocate(p);
  (void)a.empty_cache();
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
  EXPECT_EQ(be->live_events(), 0u);
}

TEST(AllocatorV2, PageReleaseKeepHoldsPagesUntilEmptyCache) {
  allocator_options o;
  o.expandable_segments = true;
  ASSERT_EQ(o.release_pages, page_release::keep);  // the default: PyTorch's own behaviour
  auto be = std::make_shared<fake_backend>(4 * GiB, true);
  caching_allocator a(be, o);
  void* x = a.allocate(40 * MiB);
  void* y = a.allocate(40 * MiB);
  a.deallocate(x);
  void* z = a.allocate(60 * MiB);
  be->complete_stream(0);
  a.deallocate(a.allocate(5 * MiB));
  EXPECT_EQ(be->mapped(), 140 * MiB);  // PyTorch's figure: x's pages stay
  EXPECT_EQ(a.stats().pages_retired, 0);
  a.deallocate(y);
  a.deallocate(z);
  (void)a.empty_cache();
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(parse_page_release("eager"), page_release::eager);
  EXPECT_THROW((void)parse_page_release("lazy"), logic_error);
}

TEST(AllocatorV2, ExpandableSegmentsBackEveryByteInUse) {
  // Random sizes in both pools on two streams, real addresses: every block is written end to
  // end and checked when freed, so a page left without memory faults. One thread alone (reserved
  // checked against the backend now and then: stats() empties the thread caches), then two at
  // once.
  allocator_options o;
  o.expandable_segments = true;
  o.release_pages = page_release::deferred;
  auto be = std::make_shared<fake_backend>(3 * GiB);
  caching_allocator a(be, o);
  const auto work = [&](std::uint64_t seed, bool check_reserved) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> log_size(9.0, 26.0);  // 512 B .. 64 MiB
    struct live {
      unsigned char* p;
      std::size_t n;
      unsigned char tag;
    };
    std::vector<live> blocks;
    for (int i = 0; i < 3000; ++i) {
      if (blocks.size() < 16 && (blocks.empty() || rng() % 3 != 0)) {
        // Mostly small: small blocks are what thread caches hold.
        const auto n = static_cast<std::size_t>(std::exp2(rng() % 2 ? log_size(rng) : 12.0));
        auto* p = static_cast<unsigned char*>(a.allocate(n, 1 + rng() % 2));
        const auto tag = static_cast<unsigned char>(rng());
        std::memset(p, tag, n);
        blocks.push_back({p, n, tag});
      } else {
        const std::size_t k = rng() % blocks.size();
        const live b = blocks[k];
        ASSERT_EQ(b.p[0], b.tag);
        ASSERT_EQ(b.p[b.n / 2], b.tag);
        ASSERT_EQ(b.p[b.n - 1], b.tag);
        a.deallocate(b.p);
        blocks[k] = blocks.back();
        blocks.pop_back();
      }
      // The streams "run" now and then: retired pages whose events are done are unmapped at a
      // later call (deferred release), and a page a live block uses must never be.
      if (rng() % 5 == 0) be->complete_stream(1 + rng() % 2);
      if (check_reserved && i % 97 == 0) {
        ASSERT_EQ(static_cast<std::size_t>(a.stats().reserved_bytes.current), be->mapped());
      }
    }
    for (const live& b : blocks) a.deallocate(b.p);
  };
  work(7, true);
  std::thread other(work, 8, false);
  work(9, false);
  other.join();
  EXPECT_EQ(static_cast<std::size_t>(a.stats().reserved_bytes.current), be->mapped());
  (void)a.empty_cache();
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}

TEST(AllocatorV2, ExpandableSegmentsUnmapBeforeRunningOutOfMemory) {
  allocator_options o;
  o.expandable_segments = true;
  auto be = std::make_shared<fake_backend>(100 * MiB, true);
  caching_allocator a(be, o);
  void* x = a.allocate(60 * MiB, 1);  // stream 1 maps 60 MiB
  a.deallocate(x);
  void* y = a.allocate(60 * MiB, 2);  // stream 2 needs pages that only stream 1's cache holds
  EXPECT_NE(y, nullptr);
  EXPECT_EQ(a.stats().alloc_retries, 1);
  EXPECT_THROW((void)a.allocate(60 * MiB, 1), out_of_memory);
  a.deallocate(y);
}

TEST(AllocatorV2, FallsBackToSegmentsWithoutVirtualMemory) {
  allocator_options o;
  o.expandable_segments = true;
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  be->disable_virtual_memory();
  caching_allocator a(be, o);
  void* p = a.allocate(30 * MiB);
  EXPECT_EQ(be->mapped(), 0u);
  EXPECT_EQ(be->allocations(), 1u);
  a.deallocate(p);
}

TEST(AllocatorV2, WithoutVirtualMemoryPlainSegmentsKeepPlainSplitRules) {
  allocator_options o;
  o.expandable_segments = true;  // asked for, but the backend has no virtual memory
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  be->disable_virtual_memory();
  caching_allocator a(be, o);
  void* p = a.allocate(19 * MiB + 512);  // a 20 MiB segment: 0.5 MiB left is not worth a block
  EXPECT_EQ(a.block_size(p), 20 * MiB);
  a.deallocate(p);
}

TEST(AllocatorV2, ExpandableSegmentsReserveCloseToLiveBytes) {
  allocator_options ex;
  ex.expandable_segments = true;
  ex.release_pages = page_release::eager;  // keep (the default) reserves what PyTorch reserves
  const auto trace = transformer_trace(10);
  const auto plain = replay_trace(trace, {});
  const auto grown = replay_trace(trace, ex);
  EXPECT_LT(grown.peak_reserved, plain.peak_reserved);
  EXPECT_LE(grown.reserved_ratio(), 1.04);
}

TEST(AllocatorV2, StressEightThreadsExpandable) {
  allocator_options o;
  o.expandable_segments = true;
  stress(o, 8, 100000 / 8);
}

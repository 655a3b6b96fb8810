// Allocator v2 on the CPU: PyTorch's knobs and conf string, merge-on-free placement, expandable
// segments over the fake backend's virtual memory, garbage collection, thread caches, and the
// stress invariants with 8 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"

using namespace gpu_basics;

namespace {
constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

std::uintptr_t addr(void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

std::string conf_error(std::string_view conf) {
  try {
    (void)parse_allocator_options(conf);
  } catch (const logic_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(AllocatorConf, ReadsPyTorchsKeysAndSyntax) {
  const auto o = parse_allocator_options(
      " expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_TRUE(o.expandable_segments);
  EXPECT_EQ(o.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(o.garbage_collection_threshold, 0.6);
  // The first interval fills everything below it; '>' everything after the last one.
  for (std::size_t i = 0; i <= 8; ++i) EXPECT_EQ(o.roundup_power2_divisions[i], 1u) << i;
  EXPECT_EQ(o.roundup_power2_divisions[9], 2u);
  EXPECT_EQ(o.roundup_power2_divisions[10], 4u);
  for (std::size_t i = 11; i < kRoundupIntervals; ++i) EXPECT_EQ(o.roundup_power2_divisions[i], 8u);
  const auto single = parse_allocator_options("roundup_power2_divisions:4");
  for (auto d : single.roundup_power2_divisions) EXPECT_EQ(d, 4u);
  EXPECT_FALSE(parse_allocator_options("expandable_segments:False").expandable_segments);
  EXPECT_EQ(parse_allocator_options("backend:native,release_lock_on_cudamalloc:True"),
            allocator_options{});
  EXPECT_EQ(parse_allocator_options(""), allocator_options{});
}

TEST(AllocatorConf, WritesWhatItReads) {
  for (const char* conf :
       {"expandable_segments:True", "max_split_size_mb:256", "roundup_power2_divisions:4",
        "roundup_power2_divisions:[1:1,2:1,4:1,8:1,16:1,32:1,64:1,128:1,256:1,512:2,>:4]",
        "expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.5",
        "expandable_segments:True,page_release:eager", "page_release:deferred"}) {
    const auto o = parse_allocator_options(conf);
    EXPECT_EQ(to_conf_string(o), conf);
    EXPECT_EQ(parse_allocator_options(to_conf_string(o)), o) << conf;
  }
  EXPECT_EQ(to_conf_string(allocator_options{}), "");
  EXPECT_EQ(
      parse_allocator_options(" page_release:deferred ,expandable_segments:True").release_pages,
      page_release::deferred);
}

TEST(AllocatorConf, BadStringsNameTheBadPart) {
  EXPECT_NE(conf_error("max_split_size_mb:20").find("max_split_size_mb: expected an integer > 20"),
            std::string::npos);
  EXPECT_NE(conf_error("max_split_size_mb:abc").find("got 'abc'"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:yes")
                .find("expandable_segments: expected True or "
                      "False, got 'yes'"),
            std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[300:2]").find("'300'"), std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[512:2,256:1]").find("increasing"),
            std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[256:2").find("closed"), std::string::npos);
  EXPECT_NE(conf_error("garbage_collection_threshold:1.0").find("strictly between 0 and 1"),
            std::string::npos);
  EXPECT_NE(conf_error("max_split_mb:128").find("unknown key 'max_split_mb'"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments").find("expected key:value"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:True,,max_split_size_mb:64").find("empty entry"),
            std::string::npos);
  EXPECT_NE(conf_error("backend:cudaMallocAsync").find("backend"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:True,page_release:lazy")
                .find("page_release: expected deferred, eager or keep, got 'lazy'"),
            std::string::npos);
}

TEST(AllocatorConf, RoundupPowerTwoDivisionsRoundsAsPyTorch) {
  allocator_options o;
  EXPECT_EQ(round_request(1200 * KiB, o), 1200 * KiB);  // no divisions: 512-byte steps
  o.roundup_power2_divisions.fill(4);
  // 1200 KiB lies in [1, 2) MiB: steps of 256 KiB -> 1280 KiB.
  EXPECT_EQ(round_request(1200 * KiB, o), 1280 * KiB);
  EXPECT_EQ(round_request(1 * MiB, o), 1 * MiB);      // a power of two stays
  EXPECT_EQ(round_request(5 * MiB + 1, o), 6 * MiB);  // [4, 8) MiB in 1 MiB steps
  EXPECT_EQ(round_request(1500, o), 1536u);           // below 512 x 4: 512-byte rounding
  EXPECT_EQ(round_request(3000, o), 3072u);           // 2048..4096 in 512-byte steps
  EXPECT_EQ(round_request(100, o), 512u);
}

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

TEST(AllocatorV2, ThreadCacheKeepsStatsExactForOneThread) {
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be);  // thread cache on (default)
  void* x = a.allocate(64 * KiB);
  a.deallocate(x);  // into this thread's cache
  void* big = a.allocate(30 * MiB);
  void* y = a.allocate(64 * KiB);  // from the cache, without the lock
  EXPECT_EQ(y, x);
  auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, static_cast<std::int64_t>(30 * MiB + 64 * KiB));
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<std::int64_t>(30 * MiB + 64 * KiB));
  a.deallocate(y);
  a.deallocate(big);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  EXPECT_EQ(s.allocation_count.allocated, 3);
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<std::int64_t>(30 * MiB + 64 * KiB));
  // A block handed out from one thread's cache can be freed, measured and recorded elsewhere.
  void* z = a.allocate(64 * KiB);
  std::thread([&] {
    EXPECT_EQ(a.block_size(z), 64 * KiB);
    a.record_stream(z, 5);
    a.deallocate(z);
  }).join();
  EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  EXPECT_EQ(a.stats().active_bytes.current, static_cast<std::int64_t>(64 * KiB));  // stream 5
  be->synchronize();
  (void)a.empty_cache();
  EXPECT_EQ(a.stats().active_bytes.current, 0);
  EXPECT_THROW(a.deallocate(z), logic_error);
}

TEST(AllocatorV2, ClaimsOfOtherThreadsCachesAreCounted) {
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be);
  // One thread: its own cache is never claimed, whatever it does.
  for (int i = 0; i < 100; ++i) a.deallocate(a.allocate(64 * KiB));
  a.deallocate(a.allocate(30 * MiB));  // a shared-cache operation
  EXPECT_EQ(a.stats().cache_claims, 0);
  EXPECT_EQ(a.stats().cache_claim_ns, 0);
  // A second thread with a cache: a block its fast path handed out, freed here, is found by
  // claiming its cache; the stats() call that reads the count claims once more.
  void* x = nullptr;
  std::latch handed(1), done(1);
  std::thread owner([&] {
    a.deallocate(a.allocate(64 * KiB));  // a cache of its own, holding a block
    x = a.allocate(64 * KiB);            // from that cache: only the owner knows it
    handed.count_down();
    done.wait();
  });
  handed.wait();
  a.deallocate(x);
  const auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_GE(s.cache_claims, 2);
  EXPECT_LE(s.cache_claims, 3);
  EXPECT_GT(s.cache_claim_ns, 0);
  done.count_down();
  owner.join();
  const nlohmann::json j = a.stats();
  EXPECT_GE(j.at("cache_claims").get<std::int64_t>(), s.cache_claims);
  EXPECT_GE(j.at("cache_claim_ns").get<std::int64_t>(), s.cache_claim_ns);
}

TEST(AllocatorV2, OtherThreadsCachedBlocksServeARequestBeforeTheBackendIsAsked) {
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be);
  void *x = nullptr, *y = nullptr;
  std::latch cached(1), done(1);
  // The thread stays alive (a thread that ends gives its cache back anyway).
  std::thread owner([&] {
    // Two 1 MiB blocks fill one 2 MiB small segment; both freed into this thread's cache.
    x = a.allocate(1 * MiB);
    y = a.allocate(1 * MiB);
    a.deallocate(x);
    a.deallocate(y);
    void* again = a.allocate(1 * MiB);  // served by the thread's own cache
    EXPECT_TRUE(again == x || again == y);
    a.deallocate(again);
    cached.count_down();
    done.wait();
  });
  cached.wait();
  EXPECT_EQ(be->allocations(), 1u);
  // Another thread's miss: the cached blocks, merged, serve it; no second segment.
  void* whole = a.allocate(1 * MiB);
  void* rest = a.allocate(1 * MiB);
  done.count_down();
  owner.join();
  EXPECT_EQ(be->allocations(), 1u);
  EXPECT_EQ(std::min(addr(whole), addr(rest)), std::min(addr(x), addr(y)));
  EXPECT_EQ(a.stats().reserved_bytes.peak, static_cast<std::int64_t>(2 * MiB));
  a.deallocate(whole);
  a.deallocate(rest);
}

TEST(AllocatorV2, ThreadCacheKeepsTheExpandableBestFitThatAvoidsARangesEnd) {
  // In an expandable range, best fit passes over the free block at the range's mapped end
  // (it can grow) for a larger one that cannot (PyTorch's get_free_block): a block freed there
  // must not wait in the thread cache, or the next request would get it back instead.
  allocator_options o;
  o.expandable_segments = true;
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be, o);
  void* y = a.allocate(1 * MiB);  // one 2 MiB page of the small pool: y, sep, end
  void* sep = a.allocate(512 * KiB);
  void* end = a.allocate(512 * KiB);  // up to the page's end: unmapped space follows
  EXPECT_EQ(addr(end), addr(y) + 1536 * KiB);
  a.deallocate(y);                   // into the thread cache ...
  void* big = a.allocate(30 * MiB);  // ... and out of it, by this operation on the cache
  a.deallocate(end);
  void* again = a.allocate(512 * KiB);  // y's free 1 MiB, not the end block
  EXPECT_EQ(again, y);
  for (void* p : {again, sep, big}) a.deallocate(p);
}

TEST(AllocatorV2, FastPathReservesNoMoreThanPlainMergeOnFree) {
  // Proof on the traces: thread caches on (default) against off, same requests.
  // With expandable segments too, where blocks in ranges wait in thread caches as well.
  for (const auto& trace : {mixed_trace(), mixed_trace(20000, 3), transformer_trace(10)})
    for (const bool expandable : {false, true}) {
      allocator_options fast, plain;
      fast.expandable_segments = plain.expandable_segments = expandable;
      plain.thread_cache_blocks = 0;
      const auto with = replay_trace(trace, fast);
      const auto without = replay_trace(trace, plain);
      EXPECT_EQ(with.peak_reserved, without.peak_reserved) << expandable;  // same placement
      EXPECT_EQ(with.backend_allocations, without.backend_allocations) << expandable;
      EXPECT_EQ(with.peak_requested, without.peak_requested) << expandable;
      EXPECT_EQ(with.peak_allocated, without.peak_allocated) << expandable;
      EXPECT_EQ(with.fragmentation_at_peak, without.fragmentation_at_peak) << expandable;
    }
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

namespace {
/// Frees a thread's remaining blocks, taking each out of the shared shadow first.
void free_all(caching_allocator& a, const std::vector<std::uintptr_t>& blocks, std::mutex& m,
              test_util::live_blocks& live) {
  for (auto p : blocks) {
    {
      std::lock_guard lock(m);
      live.erase(p);
    }
    a.deallocate(reinterpret_cast<void*>(p));
  }
}

void stress(const allocator_options& o, int threads, int ops_per_thread) {
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, true);
  caching_allocator a(be, o);
  std::mutex m;
  test_util::live_blocks live;  // shared shadow
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(2024 + static_cast<unsigned>(t));
      std::uniform_real_distribution<double> log_size(std::log(512.0), std::log(32.0 * MiB));
      std::vector<std::uintptr_t> mine;
      // Half the threads share stream 1, the others have their own.
      const stream_handle s = t % 2 ? 1 : static_cast<stream_handle>(2 + t);
      for (int op = 0; op < ops_per_thread; ++op) {
        const auto r = rng() % 100;
        if (r < 50 || mine.empty()) {
          const auto bytes = rng() % 2 ? static_cast<std::size_t>(std::exp(log_size(rng)))
                                       : std::size_t{512} << (rng() % 11);  // small, repeated
          void* p = a.allocate(bytes, s);
          const std::size_t size = a.block_size(p);
          ASSERT_GE(size, round_request(bytes));
          std::lock_guard lock(m);
          ASSERT_TRUE(live.emplace(addr(p), test_util::live_block{size, bytes, s}).second)
              << "handed out twice";
          mine.push_back(addr(p));
        } else if (r < 97) {
          const std::size_t i = rng() % mine.size();
          const std::uintptr_t p = mine[i];
          mine[i] = mine.back();
          mine.pop_back();
          if (rng() % 8 == 0) a.record_stream(reinterpret_cast<void*>(p), 40 + rng() % 3);
          {
            std::lock_guard lock(m);
            live.erase(p);
          }
          a.deallocate(reinterpret_cast<void*>(p));
        } else if (r < 99) {
          be->complete_stream(40 + rng() % 3);
        } else {
          (void)a.empty_cache();
        }
      }
      free_all(a, mine, m, live);
    });
  for (auto& th : pool) th.join();
  ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, live));
  be->synchronize();
  (void)a.empty_cache();
  EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  EXPECT_EQ(a.stats().active_bytes.current, 0);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(be->used(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}
}  // namespace

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

TEST(AllocatorV2, StressEightThreadsKeepsInvariants) {
  stress({}, 8, 100000 / 8);
}

TEST(AllocatorV2, StressEightThreadsExpandable) {
  allocator_options o;
  o.expandable_segments = true;
  stress(o, 8, 100000 / 8);
}

TEST(AllocatorV2, StressFreesFromOtherThreads) {
  // As PyTorch's autograd thread frees what the forward pass allocated: blocks handed out by one
  // thread's fast path are freed by another, while stats, block_size and empty_cache claim the
  // other threads' caches under the allocator's lock.
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, true);
  caching_allocator a(be);
  std::mutex m;
  test_util::live_blocks live;
  std::vector<std::uintptr_t> shared;  // allocated by any thread, freed by any thread
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(77 + static_cast<unsigned>(t));
      std::vector<std::uintptr_t> mine;
      for (int op = 0; op < 40000; ++op) {
        const auto r = rng() % 1000;
        if (r < 480) {
          const std::size_t bytes = std::size_t{512} << (rng() % 6);
          void* p = a.allocate(bytes, 1);
          if (rng() % 16 == 0) {
            ASSERT_EQ(a.block_size(p), bytes);
          }
          const bool to_share = rng() % 2;
          std::lock_guard lock(m);
          ASSERT_TRUE(live.emplace(addr(p), test_util::live_block{bytes, bytes, 1}).second)
              << "handed out twice";
          (to_share ? shared : mine).push_back(addr(p));
        } else if (r < 990) {
          std::uintptr_t p = 0;
          if (rng() % 2 && !mine.empty()) {
            p = mine.back();
            mine.pop_back();
          } else {
            std::lock_guard lock(m);
            if (shared.empty()) continue;
            const std::size_t i = rng() % shared.size();
            p = shared[i];
            shared[i] = shared.back();
            shared.pop_back();
          }
          {
            std::lock_guard lock(m);
            live.erase(p);
          }
          a.deallocate(reinterpret_cast<void*>(p));
        } else if (r < 998) {
          const auto s = a.stats();
          ASSERT_GE(s.allocated_bytes.current, 0);
        } else {
          (void)a.empty_cache();
        }
      }
      free_all(a, mine, m, live);
    });
  for (auto& th : pool) th.join();
  ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, live));
  for (auto p : shared) a.deallocate(reinterpret_cast<void*>(p));
  live.clear();
  ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, live));
  (void)a.empty_cache();
  EXPECT_EQ(be->used(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}

TEST(AllocatorV2, ClaimsWaitForTheOwnersFastPath) {
  // One thread runs its fast path flat out (one 64 KiB block, cached and handed out again, on a
  // stream of its own) while another folds its counters, empties its cache and allocates under
  // the allocator's lock: every claim must wait for the owner's operation in flight (or make the
  // owner take the lock). Were a fold to race the owner's counters, they would not add up to zero
  // at the end; were a sweep to move the block the owner is handing out, the other thread could
  // be handed the owner's live block.
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be);
  std::atomic<std::uintptr_t> held{0};
  std::atomic<bool> done{false};
  std::atomic<int> clashes{0};
  std::thread owner([&] {
    for (int i = 0; i < 2000000; ++i) {
      void* p = a.allocate(64 * KiB, 7);
      held.store(addr(p), std::memory_order_relaxed);
      held.store(0, std::memory_order_relaxed);
      a.deallocate(p);
    }
    done.store(true);
  });
  for (int rounds = 0; !done.load() || rounds < 100; ++rounds) {
    void* x = a.allocate(64 * KiB, 7);
    if (addr(x) == held.load()) clashes.fetch_add(1);
    a.deallocate(x);
    for (int k = 0; k < 64; ++k) a.reset_peak_stats();  // folds the owner's counters
    if (rounds % 64 == 0) (void)a.stats();              // empties the owner's cache
  }
  owner.join();
  EXPECT_EQ(clashes.load(), 0) << "a block was handed to two users";
  const auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.allocated, s.allocation_count.freed);
  ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, *be, {}));
  (void)a.empty_cache();
  EXPECT_EQ(be->used(), 0u);
}

TEST(AllocatorV2, ThreadsThatEndLeaveNothingBehind) {
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  {
    caching_allocator a(be);
    void* kept = nullptr;
    for (int t = 0; t < 20; ++t)
      std::thread([&] {
        void* p = a.allocate(4 * KiB);
        a.deallocate(p);                        // into the thread's cache
        if (!kept) kept = a.allocate(4 * KiB);  // handed out from it, still live
      }).join();
    a.deallocate(kept);  // from another thread, after its owner ended
    EXPECT_EQ(a.stats().allocated_bytes.current, 0);
    (void)a.empty_cache();
    EXPECT_EQ(be->used(), 0u);
  }
  // An allocator destroyed while a thread still has a cache for it: the thread ends cleanly.
  std::thread late;
  {
    caching_allocator b(be);
    late = std::thread([&] { b.deallocate(b.allocate(4 * KiB)); });
    late.join();
  }
  std::thread([] {}).join();
  EXPECT_EQ(be->used(), 0u);
}

TEST(AllocatorV2, ImpossibleSizesAreOutOfMemoryNotAWrappedRounding) {
  caching_allocator a(std::make_shared<fake_backend>(1 * GiB, true));
  EXPECT_THROW((void)a.allocate(SIZE_MAX), out_of_memory);
  EXPECT_THROW((void)a.allocate(SIZE_MAX - 100), out_of_memory);
  EXPECT_EQ(a.stats().allocation_count.current, 0);
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

TEST(AllocatorV2, FreesFromThreadLocalDestructorsAfterTheCacheSlotsAreGone) {
  // A thread_local constructed before the allocator's first use in that thread is destroyed
  // after the thread's cache slots: its free must not reach the (orphaned) cache through them.
  auto be = std::make_shared<fake_backend>(1 * GiB, true);
  caching_allocator a(be);
  struct late_free {
    caching_allocator* alloc = nullptr;
    void* p = nullptr;
    ~late_free() {
      if (alloc) alloc->deallocate(p);
    }
  };
  std::thread([&] {
    thread_local late_free late;  // constructed first, destroyed last
    void* warm = a.allocate(4 * KiB);
    a.deallocate(warm);                  // into this thread's cache
    late.p = a.allocate(4 * KiB);        // handed out from it
    void* cached = a.allocate(8 * KiB);  // and one more block left cached at exit
    a.deallocate(cached);
    late.alloc = &a;
  }).join();
  const auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  (void)a.empty_cache();
  EXPECT_EQ(be->used(), 0u);
}

// Thread caches on the CPU: exact statistics with one thread, claims of other threads' caches,
// cached blocks that serve other threads before the backend is asked, the same placement as plain
// merge-on-free, frees from other threads and from thread-local destructors, threads that end, and
// the stress invariants with 8 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"

using namespace gpu_basics;
using namespace gpu_basics::test_util;

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

TEST(AllocatorV2, StressEightThreadsKeepsInvariants) {
  stress({}, 8, 100000 / 8);
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

// The caching allocator's bookkeeping on the CPU, over the fake backend: rounding and pools,
// splitting and merging, stream-ordered reuse and record_stream, empty_cache, retries, out of
// memory and the reserved limit, max_split_size, history, and a randomised stress run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

using namespace gpu_basics;

namespace {
constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

struct fixture {
  std::shared_ptr<fake_backend> backend;
  caching_allocator alloc;
  std::vector<alloc_trace> traces;
  explicit fixture(std::size_t capacity = 1 * GiB, allocator_options o = {}, bool fake = false)
      : backend(std::make_shared<fake_backend>(capacity, fake)), alloc(backend, o) {
    alloc.set_trace_callback([this](const alloc_trace& t) { traces.push_back(t); });
  }
  alloc_source last() const { return traces.back().source; }
};

std::uintptr_t addr(void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}
}  // namespace

TEST(FakeBackend, MadeUpAddressesFollowTheirPlacement) {
  const auto addresses = [](address_placement p, bool free_second = false) {
    fake_backend be(std::size_t{1} << 46, /*fake_addresses=*/true);
    be.set_address_placement(p);
    std::vector<std::uintptr_t> v;
    for (int i = 0; i < 6; ++i) {
      v.push_back(reinterpret_cast<std::uintptr_t>(be.allocate((i + 1) * MiB)));
      if (free_second && i == 1) be.deallocate(reinterpret_cast<void*>(v[1]), 2 * MiB);
    }
    // No two ranges overlap, whatever the order.
    for (std::size_t a = 0; a < v.size(); ++a)
      for (std::size_t b = 0; b < v.size(); ++b)
        if (a != b && !(free_second && (a == 1 || b == 1))) {
          EXPECT_TRUE(v[a] + (a + 1) * MiB <= v[b] || v[b] + (b + 1) * MiB <= v[a]) << a << b;
        }
    EXPECT_EQ(be.bad_deallocations(), 0u);
    return v;
  };
  const auto up = addresses({});
  EXPECT_TRUE(std::is_sorted(up.begin(), up.end()));
  auto down = addresses({address_order::descending, 0});
  EXPECT_TRUE(std::is_sorted(down.rbegin(), down.rend()));
  const auto s1 = addresses({address_order::shuffled, 1});
  EXPECT_EQ(s1, addresses({address_order::shuffled, 1}));  // a seed gives the same places
  EXPECT_NE(s1, addresses({address_order::shuffled, 2}));
  EXPECT_FALSE(std::is_sorted(s1.begin(), s1.end()));
  EXPECT_FALSE(std::is_sorted(s1.rbegin(), s1.rend()));
  (void)addresses({address_order::shuffled, 3}, /*free_second=*/true);
  {  // a freed slot is free again; a seed whose mix is 0 still gives distinct places
    fake_backend be(std::size_t{1} << 46, /*fake_addresses=*/true);
    be.set_address_placement({address_order::shuffled, 13676627961686542615ull});
    void* a = be.allocate(MiB);
    void* b = be.allocate(MiB);
    EXPECT_NE(a, b);
    EXPECT_EQ(be.shuffled_slots(), 2u);
    be.deallocate(a, MiB);
    EXPECT_EQ(be.shuffled_slots(), 1u);
    be.deallocate(b, MiB);
    EXPECT_EQ(be.shuffled_slots(), 0u);
  }
  EXPECT_EQ(address_placement({address_order::shuffled, 3}).name(), "shuffled (seed 3)");
  EXPECT_EQ(address_placement{}.name(), "ascending");
}

TEST(CachingAllocator, RoundingAndPools) {
  EXPECT_EQ(round_request(0), 512u);
  EXPECT_EQ(round_request(1), 512u);
  EXPECT_EQ(round_request(512), 512u);
  EXPECT_EQ(round_request(513), 1024u);
  EXPECT_TRUE(is_small_request(1 * MiB));
  EXPECT_FALSE(is_small_request(1 * MiB + 512));
  EXPECT_EQ(segment_size_for(512), 2 * MiB);
  EXPECT_EQ(segment_size_for(1 * MiB), 2 * MiB);
  EXPECT_EQ(segment_size_for(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB), 10 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareOneSegment) {
  fixture f;
  void* a = f.alloc.allocate(1000);
  EXPECT_EQ(f.last(), alloc_source::new_segment);
  EXPECT_TRUE(f.traces.back().small_pool);
  EXPECT_EQ(f.traces.back().rounded, 1024u);
  void* b = f.alloc.allocate(100);
  EXPECT_EQ(f.last(), alloc_source::split);
  EXPECT_EQ(addr(b), addr(a) + 1024);  // best fit takes the remainder right after a
  const auto s = f.alloc.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.allocated_bytes.current, 1024 + 512);
  EXPECT_EQ(s.requested_bytes.current, 1100);
  EXPECT_EQ(s.device_allocations, 1);
  EXPECT_EQ(f.backend->allocations(), 1u);
  f.alloc.deallocate(a);
  f.alloc.deallocate(b);
}

TEST(CachingAllocator, SplitAndCoalesce) {
  fixture f;
  void* a = f.alloc.allocate(256 * KiB);
  void* b = f.alloc.allocate(256 * KiB);
  void* c = f.alloc.allocate(256 * KiB);
  EXPECT_EQ(f.alloc.stats().inactive_split_count.current, 1);  // the tail of the segment
  f.alloc.deallocate(b);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.inactive_split_count.current, 2);
  EXPECT_EQ(s.inactive_split_bytes.current, static_cast<std::int64_t>(256 * KiB + 1280 * KiB));
  EXPECT_NEAR(s.fragmentation, 1.0 - 1280.0 / 1536.0, 1e-12);
  f.alloc.deallocate(a);  // merges with b
  s = f.alloc.stats();
  EXPECT_EQ(s.inactive_split_count.current, 2);
  EXPECT_EQ(s.largest_free_block, 1280 * KiB);
  f.alloc.deallocate(c);  // merges with a+b and the tail: the whole segment is one block again
  s = f.alloc.stats();
  EXPECT_EQ(s.inactive_split_count.current, 0);
  EXPECT_EQ(s.largest_free_block, 2 * MiB);
  EXPECT_EQ(s.fragmentation, 0.0);
  void* d = f.alloc.allocate(1 * MiB);
  EXPECT_EQ(addr(d), addr(a));
  EXPECT_EQ(f.last(), alloc_source::split);
  EXPECT_EQ(f.alloc.stats().device_allocations, 1);
  f.alloc.deallocate(d);
}

TEST(CachingAllocator, LargeBlocksSplitOnlyWithMoreThanOneMiBLeft) {
  fixture f;
  void* a = f.alloc.allocate(19 * MiB + 512);  // 20 MiB segment, 0.5 MiB left: not split
  EXPECT_EQ(f.alloc.stats().allocated_bytes.current, static_cast<std::int64_t>(20 * MiB));
  f.alloc.deallocate(a);
  void* b = f.alloc.allocate(3 * MiB);  // reuses the cached 20 MiB block, split: 17 MiB left
  EXPECT_EQ(addr(b), addr(a));
  EXPECT_EQ(f.last(), alloc_source::split);
  EXPECT_EQ(f.alloc.stats().allocated_bytes.current, static_cast<std::int64_t>(3 * MiB));
  f.alloc.deallocate(b);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheOtherStreamsEventsComplete) {
  fixture f;
  void* a = f.alloc.allocate(1 * MiB + 512, 1);  // large pool, 20 MiB segment
  f.alloc.record_stream(a, 2);
  f.alloc.record_stream(a, 3);
  f.alloc.record_stream(a, 1);  // its own stream: nothing to wait for
  f.alloc.deallocate(a);
  EXPECT_EQ(f.backend->live_events(), 2u);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.active_bytes.current,
            static_cast<std::int64_t>(1 * MiB + 512));  // still in use on 2, 3
  void* b = f.alloc.allocate(1 * MiB + 512, 1);
  EXPECT_NE(addr(b), addr(a));  // not reused while streams 2 and 3 may still read it
  f.alloc.deallocate(b);
  f.backend->complete_stream(2);
  void* c = f.alloc.allocate(1 * MiB + 512, 1);
  EXPECT_NE(addr(c), addr(a));  // stream 3 not done yet
  f.alloc.deallocate(c);
  f.backend->complete_stream(3);
  void* d = f.alloc.allocate(1 * MiB + 512, 1);
  EXPECT_EQ(addr(d), addr(a));
  EXPECT_EQ(f.backend->live_events(), 0u);
  f.alloc.deallocate(d);
  EXPECT_EQ(f.alloc.stats().active_bytes.current, 0);
}

TEST(CachingAllocator, EmptyCacheReleasesUnsplitFreeSegmentsAndSaysWhatItKept) {
  fixture f;
  void* small1 = f.alloc.allocate(4 * KiB);
  void* small2 = f.alloc.allocate(4 * KiB);  // same 2 MiB segment
  void* large = f.alloc.allocate(30 * MiB);
  void* pending = f.alloc.allocate(12 * MiB, 5);
  f.alloc.record_stream(pending, 6);
  f.alloc.deallocate(small2);
  f.alloc.deallocate(large);
  f.alloc.deallocate(pending);
  const auto r = f.alloc.empty_cache();
  EXPECT_EQ(r.released_segments, 1u);
  EXPECT_EQ(r.released_bytes, 30 * MiB);
  EXPECT_EQ(r.kept_in_use_segments, 1u);   // small1 still allocated in the split segment
  EXPECT_EQ(r.kept_pending_segments, 1u);  // waiting for stream 6
  EXPECT_EQ(r.kept_bytes, 2 * MiB + 12 * MiB);
  EXPECT_EQ(f.backend->used(), 14 * MiB);
  f.alloc.deallocate(small1);
  f.backend->complete_stream(6);
  const auto r2 = f.alloc.empty_cache();
  EXPECT_EQ(r2.released_segments, 2u);
  EXPECT_EQ(f.backend->used(), 0u);
  const auto s = f.alloc.stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.device_frees, 3);
  EXPECT_EQ(nlohmann::json(r)["released_bytes"], 30 * MiB);
}

TEST(CachingAllocator, FailedDeviceAllocationFreesTheCacheAndRetries) {
  fixture f(64 * MiB);
  void* a = f.alloc.allocate(40 * MiB, 1);
  f.alloc.deallocate(a);                    // cached, on stream 1
  void* b = f.alloc.allocate(40 * MiB, 2);  // no room next to the cached 40 MiB: retry
  EXPECT_EQ(f.last(), alloc_source::after_retry);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.alloc_retries, 1);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<std::int64_t>(40 * MiB));
  try {
    (void)f.alloc.allocate(40 * MiB, 2);
    FAIL() << "40 MiB more fit in 64 MiB";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested_bytes(), 40 * MiB);
    for (const char* part :
         {"tried to allocate 40.0 MiB", "40.0 MiB allocated", "40.0 MiB reserved",
          "0.0 MiB reserved but free", "largest free block 0.0 MiB", "fragmentation 0.0%",
          "fake memory: 24.0 MiB free of 64.0 MiB"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  }
  s = f.alloc.stats();
  EXPECT_EQ(s.ooms, 1);
  EXPECT_EQ(s.allocated_bytes.current, static_cast<std::int64_t>(40 * MiB));  // state intact
  f.alloc.deallocate(b);
}

TEST(CachingAllocator, TransientBackendFailureIsRetried) {
  fixture f;
  f.backend->fail_next_allocations(1);
  void* a = f.alloc.allocate(1 * KiB);
  EXPECT_EQ(f.last(), alloc_source::after_retry);
  EXPECT_EQ(f.alloc.stats().alloc_retries, 1);
  f.alloc.deallocate(a);
}

TEST(CachingAllocator, ReservedLimitIsAnOutOfMemoryThatNamesIt) {
  allocator_options o;
  o.reserved_limit = 32 * MiB;
  fixture f(1 * GiB, o);
  void* a = f.alloc.allocate(1 * MiB);  // 2 MiB segment
  void* b = f.alloc.allocate(6 * MiB);  // 20 MiB segment: 22 MiB reserved
  try {
    (void)f.alloc.allocate(
        16 * MiB);  // 14 MiB are free in the 20 MiB segment: a new 16 MiB one would pass the limit
    FAIL();
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("reserved limit 32.0 MiB"), std::string::npos) << e.what();
  }
  f.alloc.deallocate(b);
  void* c = f.alloc.allocate(16 * MiB,
                             2);  // another stream: the cached 20 MiB segment is released for it
  EXPECT_EQ(f.last(), alloc_source::after_retry);
  EXPECT_EQ(f.alloc.stats().reserved_bytes.current, static_cast<std::int64_t>(18 * MiB));
  f.alloc.deallocate(a);
  f.alloc.deallocate(c);
}

TEST(CachingAllocator, MaxSplitSizeKeepsSmallRequestsOutOfLargeBlocks) {
  for (bool limited : {false, true}) {
    allocator_options o;
    if (limited) o.max_split_size = 16 * MiB;
    fixture f(1 * GiB, o);
    void* big = f.alloc.allocate(32 * MiB);
    f.alloc.deallocate(big);
    void* small = f.alloc.allocate(2 * MiB);
    if (limited) {
      EXPECT_NE(addr(small), addr(big));  // the 32 MiB block stays whole for large requests
      EXPECT_EQ(f.alloc.stats().segment_count.current, 2);
    } else {
      EXPECT_EQ(addr(small), addr(big));  // carved out of the cached 32 MiB block
      EXPECT_EQ(f.alloc.stats().segment_count.current, 1);
    }
    f.alloc.deallocate(small);
    if (limited) {  // a request within 20 MiB of the oversize block may still take it whole
      void* again = f.alloc.allocate(30 * MiB);
      EXPECT_EQ(addr(again), addr(big));
      EXPECT_EQ(f.alloc.stats().allocated_bytes.current, static_cast<std::int64_t>(32 * MiB));
      f.alloc.deallocate(again);
    }
  }
}

TEST(CachingAllocator, HistoryIsBoundedAndExported) {
  allocator_options o;
  o.history_capacity = 4;
  fixture f(1 * GiB, o);
  for (int i = 0; i < 5; ++i) f.alloc.deallocate(f.alloc.allocate(1 * KiB, 7));
  const auto h = f.alloc.history();
  ASSERT_EQ(h.size(), 4u);
  // As in PyTorch's snapshots: the free request, then its completion (at once: no other stream
  // used the block).
  EXPECT_EQ(h.back().kind, history_kind::free_completed);
  EXPECT_EQ(h[h.size() - 2].kind, history_kind::free);
  EXPECT_EQ(h[h.size() - 3].kind, history_kind::alloc);
  EXPECT_EQ(h.back().stream, 7u);
  EXPECT_LE(h.front().time_ns, h.back().time_ns);
  const nlohmann::json j = h[h.size() - 2];
  EXPECT_EQ(j["kind"], "free");
  EXPECT_EQ(j["bytes"], 1024);
}

namespace {
/// The shared invariants, and those of one thread with plain segments: every segment is one
/// backend allocation, and peaks and inactive splits are consistent.
void check_single_thread_invariants(const caching_allocator& a, const fake_backend& be,
                                    const test_util::live_blocks& live) {
  ASSERT_NO_FATAL_FAILURE(test_util::check_invariants(a, be, live));
  const auto s = a.stats();
  ASSERT_EQ(s.device_allocations - s.device_frees, s.segment_count.current);
  for (const memory_stat* st :
       {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes})
    ASSERT_GE(st->peak, st->current);
  ASSERT_GE(s.inactive_split_bytes.current, 0);
  ASSERT_LE(static_cast<std::size_t>(s.inactive_split_bytes.current), s.cached_free_bytes);
}
}  // namespace

TEST(CachingAllocator, RandomizedStressKeepsEveryInvariant) {
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, /*fake_addresses=*/true);
  caching_allocator a(be);
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> log_size(std::log(512.0), std::log(32.0 * MiB));
  test_util::live_blocks live;
  std::vector<std::uintptr_t> order;
  for (int op = 0; op < 100000; ++op) {
    const auto r = rng() % 100;
    if (r < 50 || live.empty()) {
      const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
      const stream_handle s = 1 + rng() % 3;
      void* p = a.allocate(bytes, s);
      ASSERT_EQ(addr(p) % 512, 0u);
      const std::size_t size = a.block_size(p);
      ASSERT_GE(size, round_request(bytes));
      ASSERT_LE(size - round_request(bytes), 1 * MiB);  // a remainder too small to split
      ASSERT_TRUE(live.emplace(addr(p), test_util::live_block{size, bytes, s}).second);
      order.push_back(addr(p));
    } else if (r < 95) {
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
    if (op % 997 == 0) check_single_thread_invariants(a, *be, live);
  }
  check_single_thread_invariants(a, *be, live);
  for (auto p : order) a.deallocate(reinterpret_cast<void*>(p));
  live.clear();
  be->synchronize();
  (void)a.empty_cache();
  check_single_thread_invariants(a, *be, live);
  EXPECT_EQ(be->used(), 0u);
  EXPECT_EQ(be->live_events(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
  EXPECT_EQ(a.stats().active_bytes.current, 0);
}

TEST(CachingAllocator, ManyThreadsAtOnce) {
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, true);
  caching_allocator a(be);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> mine;
      const stream_handle s = 1 + static_cast<stream_handle>(t % 4);
      for (int i = 0; i < 20000; ++i) {
        if (mine.empty() || rng() % 2) {
          mine.push_back(a.allocate(512u << (rng() % 14), s));
        } else {
          const std::size_t k = rng() % mine.size();
          if (rng() % 16 == 0) a.record_stream(mine[k], s + 1);
          a.deallocate(mine[k]);
          mine[k] = mine.back();
          mine.pop_back();
        }
        if (i % 4096 == 0) be->complete_stream(s + 1);
      }
      for (void* p : mine) a.deallocate(p);
    });
  for (auto& th : threads) th.join();
  be->synchronize();
  (void)a.empty_cache();
  const auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(be->used(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}

TEST(CachingAllocator, ANullBackendIsALogicErrorNotACrash) {
  EXPECT_THROW(caching_allocator(std::shared_ptr<allocator_backend>{}), logic_error);
}

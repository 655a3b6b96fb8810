// What the caching allocator's tests share: sizes and addresses, a shadow of the live blocks and
// the invariants its statistics must keep against it (the pools' counters adding up to both's
// too), and the multi-threaded stress run.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

namespace gpu_basics::test_util {

inline constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

/// A pointer as a number, to compare and offset addresses.
inline std::uintptr_t addr(void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

/// A live block as the test saw it handed out.
struct live_block {
  std::size_t rounded;    // the block's size as the allocator reports it
  std::size_t requested;  // the size asked for
  stream_handle stream = 0;
};
/// Live blocks by address.
using live_blocks = std::map<std::uintptr_t, live_block>;

/// Every counter of both pools (allocator_stats's pool_stats base) as the two pools' sum for
/// current, allocated and freed; each peak at least its current, and the peak of both no higher
/// than the pools' peaks added. Call it through ASSERT_NO_FATAL_FAILURE.
inline void check_pool_sums(const allocator_stats& s) {
  const pool_stats& all = s;
  for (auto m :
       {&pool_stats::allocated_bytes, &pool_stats::requested_bytes, &pool_stats::reserved_bytes,
        &pool_stats::active_bytes, &pool_stats::inactive_split_bytes, &pool_stats::allocation_count,
        &pool_stats::segment_count, &pool_stats::active_count, &pool_stats::inactive_split_count}) {
    const memory_stat &a = all.*m, &sm = s.small_pool.*m, &lg = s.large_pool.*m;
    ASSERT_EQ(a.current, sm.current + lg.current);
    ASSERT_EQ(a.allocated, sm.allocated + lg.allocated);
    ASSERT_EQ(a.freed, sm.freed + lg.freed);
    ASSERT_GE(sm.peak, sm.current);
    ASSERT_GE(lg.peak, lg.current);
    ASSERT_LE(a.peak, sm.peak + lg.peak);
    ASSERT_GE(a.peak, a.current);
  }
}

/// The invariants every state keeps: no two live blocks overlap, the counters add up to the live
/// blocks, reserved bytes are the backend's, and reserved = active + cached free. Call it through
/// ASSERT_NO_FATAL_FAILURE.
inline void check_invariants(const caching_allocator& a, const fake_backend& be,
                             const live_blocks& live) {
  std::int64_t rounded = 0, requested = 0;
  std::uintptr_t end = 0;
  for (const auto& [p, b] : live) {
    ASSERT_GE(p, end) << "two live blocks overlap";
    end = p + b.rounded;
    rounded += static_cast<std::int64_t>(b.rounded);
    requested += static_cast<std::int64_t>(b.requested);
  }
  const auto s = a.stats();
  ASSERT_EQ(s.allocated_bytes.current, rounded);
  ASSERT_EQ(s.requested_bytes.current, requested);
  ASSERT_EQ(s.allocation_count.current, static_cast<std::int64_t>(live.size()));
  ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.current), be.used());  // bytes are conserved
  ASSERT_GE(s.active_bytes.current, s.allocated_bytes.current);
  ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.current),
            static_cast<std::size_t>(s.active_bytes.current) + s.cached_free_bytes);
  ASSERT_GE(s.allocated_bytes.peak, s.allocated_bytes.current);
  ASSERT_NO_FATAL_FAILURE(check_pool_sums(s));
}

/// Frees a thread's remaining blocks, taking each out of the shared shadow first.
inline void free_all(caching_allocator& a, const std::vector<std::uintptr_t>& blocks, std::mutex& m,
                     live_blocks& live) {
  for (auto p : blocks) {
    {
      std::lock_guard lock(m);
      live.erase(p);
    }
    a.deallocate(reinterpret_cast<void*>(p));
  }
}

/// `threads` threads allocate, free, record streams, complete streams and empty the cache at random
/// over one allocator, with a shared shadow of the live blocks; every block is freed at the end and
/// the backend must get all its memory back.
inline void stress(const allocator_options& o, int threads, int ops_per_thread) {
  auto be = std::make_shared<fake_backend>(std::size_t{1} << 40, true);
  caching_allocator a(be, o);
  std::mutex m;
  live_blocks live;  // shared shadow
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
          ASSERT_TRUE(live.emplace(addr(p), live_block{size, bytes, s}).second)
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
  ASSERT_NO_FATAL_FAILURE(check_invariants(a, *be, live));
  be->synchronize();
  (void)a.empty_cache();
  EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  EXPECT_EQ(a.stats().active_bytes.current, 0);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(be->used(), 0u);
  EXPECT_EQ(be->bad_deallocations(), 0u);
}
}  // namespace gpu_basics::test_util

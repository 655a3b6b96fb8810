// The caching allocator's contract: one parameterised suite (AllocatorContract) of what holds
// whatever backend the allocator draws from, as rmm's mr_ref_test.hpp runs one suite over every
// memory resource. A test file instantiates it with harnesses for its backend and the options to
// run under, named `<Backend>/AllocatorContract.<Test>/<options>` (Fake on the CPU, Cuda on the
// GPU): `--gtest_filter='*AllocatorContract*'` runs them all.
//
// Blocks are read and written only through the harness (memcpy for host memory, copies through
// the device's streams for device memory), with seeded random data, and every read back is
// compared with what was written: a copy that did not happen, a block that overlaps another or a
// page without memory behind it shows as a mismatch.
//
// Include it in one translation unit per test binary: the tests are defined here.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

namespace gpu_basics::contract {

inline constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
/// The streams a harness offers.
inline constexpr std::size_t kStreams = 4;

/// What the suite needs of a backend beyond allocator_backend: fresh backends, streams, and copies
/// between host memory and blocks.
class allocator_contract_harness {
 public:
  virtual ~allocator_contract_harness() = default;
  /// Why this backend cannot be tested here ("" when it can); the tests are skipped with it.
  [[nodiscard]] virtual std::string unavailable() const { return ""; }
  /// A fresh backend for one allocator.
  [[nodiscard]] virtual std::shared_ptr<allocator_backend> make_backend() = 0;
  /// Stream `i` (< kStreams): distinct streams, alive as long as the harness.
  [[nodiscard]] virtual stream_handle stream(std::size_t i) = 0;
  /// Copies `n` bytes of host memory at `src` into a block at `dst` on stream `s`; returns once
  /// the copy is done.
  virtual void write(void* dst, const void* src, std::size_t n, stream_handle s) = 0;
  /// Copies `n` bytes of a block at `src` into host memory at `dst` on stream `s`; returns once
  /// the copy is done.
  virtual void read(void* dst, const void* src, std::size_t n, stream_handle s) = 0;
  /// How far the backend's free memory may move meanwhile through other users (0: not at all).
  [[nodiscard]] virtual std::size_t memory_info_slack() const { return 0; }
};

/// One instantiation's harness and the allocator options its tests run under.
struct allocator_contract_param {
  std::string name;  // the test name's suffix: letters, digits and '_'
  std::function<std::unique_ptr<allocator_contract_harness>()> harness;
  allocator_options options;
};

inline void PrintTo(const allocator_contract_param& p, std::ostream* os) {
  *os << p.name;
}

/// The test name's suffix of an instantiation (INSTANTIATE_TEST_SUITE_P's last argument).
inline std::string contract_param_name(
    const ::testing::TestParamInfo<allocator_contract_param>& info) {
  return info.param.name;
}

/// `n` bytes from a seeded generator (splitmix64).
inline std::vector<unsigned char> random_bytes(std::uint64_t seed, std::size_t n) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(v.data() + i, &z, std::min<std::size_t>(8, n - i));
  }
  return v;
}

inline std::uintptr_t address(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

class AllocatorContract : public ::testing::TestWithParam<allocator_contract_param> {
 protected:
  void SetUp() override {
    h_ = GetParam().harness();
    ASSERT_NE(h_, nullptr);
    if (const std::string why = h_->unavailable(); !why.empty()) GTEST_SKIP() << why;
  }

  [[nodiscard]] const allocator_options& options() const { return GetParam().options; }
  /// An allocator over a fresh backend, under the instantiation's options.
  [[nodiscard]] std::unique_ptr<caching_allocator> make() {
    return std::make_unique<caching_allocator>(h_->make_backend(), options());
  }
  [[nodiscard]] stream_handle stream(std::size_t i) const { return h_->stream(i); }

  /// Writes `n` random bytes of `seed` into the block at `p` on `s`; returns them.
  std::vector<unsigned char> fill(void* p, std::size_t n, std::uint64_t seed, stream_handle s) {
    auto data = random_bytes(seed, n);
    h_->write(p, data.data(), n, s);
    return data;
  }
  /// Bytes of the block at `p` that differ from `expected`, read on `s`. The host buffer starts
  /// as the complement of `expected`, so a read that copied nothing counts every byte.
  std::size_t mismatches(const void* p, const std::vector<unsigned char>& expected,
                         stream_handle s) {
    std::vector<unsigned char> got(expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) got[i] = static_cast<unsigned char>(~expected[i]);
    h_->read(got.data(), p, got.size(), s);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != expected[i];
    return bad;
  }
  /// The segment that holds `p` (a default one, of size 0, when none does).
  static segment_view segment_of(const caching_allocator& a, const void* p) {
    for (const auto& s : a.segments())
      if (address(p) >= s.ptr && address(p) < s.ptr + s.total_size) return s;
    return {};
  }

  std::unique_ptr<allocator_contract_harness> h_;
};

/// A live block as a test saw it handed out, with what was written into it.
struct contract_block {
  void* p = nullptr;
  std::size_t requested = 0;
  stream_handle stream = 0;
  std::vector<unsigned char> data;
};

// Every block handed out is its own: none overlaps another, and what each holds is what was
// written into it after all of them were written.
TEST_P(AllocatorContract, AllocationsAreDistinctAndDoNotOverlap) {
  auto a = make();
  std::mt19937_64 rng(11);
  const std::size_t sizes[] = {1,       511,         512,         4097,           64 * KiB + 3,
                               1 * MiB, 1 * MiB + 1, 3 * MiB + 5, 19 * MiB + 512, 33 * MiB};
  std::vector<contract_block> blocks;
  for (int i = 0; i < 48; ++i) {
    const std::size_t n = sizes[rng() % std::size(sizes)];
    const stream_handle s = stream(rng() % 2);
    void* p = a->allocate(n, s);
    ASSERT_NE(p, nullptr);
    blocks.push_back({p, n, s, {}});
  }
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;
  for (const auto& b : blocks) ranges.emplace_back(address(b.p), a->block_size(b.p));
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    ASSERT_GE(ranges[i].first, ranges[i - 1].first + ranges[i - 1].second)
        << "blocks " << i - 1 << " and " << i << " (by address) overlap";
  for (std::size_t i = 0; i < blocks.size(); ++i)
    blocks[i].data = fill(blocks[i].p, blocks[i].requested, 1000 + i, blocks[i].stream);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(mismatches(blocks[i].p, blocks[i].data, blocks[i].stream), 0u) << "block " << i;
  for (const auto& b : blocks) a->deallocate(b.p);
  EXPECT_EQ(a->stats().allocation_count.current, 0);
}

// Blocks start at multiples of 512 bytes and hold at least the request rounded as the options
// say; allocated and requested bytes count exactly the live blocks; a null free does nothing.
TEST_P(AllocatorContract, BlocksAreAlignedAndRoundedAsTheOptionsSay) {
  auto a = make();
  const std::size_t sizes[] = {0,           1,          100,         511,         512,
                               513,         1000,       4097,        1 * MiB - 1, 1 * MiB,
                               1 * MiB + 1, 1200 * KiB, 5 * MiB + 1, 10 * MiB,    10 * MiB + 512,
                               25 * MiB + 3};
  std::vector<void*> live;
  std::int64_t block_bytes = 0, requested = 0;
  for (std::size_t n : sizes) {
    void* p = a->allocate(n, stream(0));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(address(p) % 512, 0u) << n;
    const std::size_t rounded = round_request(n, options());
    EXPECT_GE(rounded, std::max<std::size_t>(n, 512)) << n;
    EXPECT_EQ(rounded % 512, 0u) << n;
    const std::size_t size = a->block_size(p);
    EXPECT_GE(size, rounded) << n;
    EXPECT_LE(size - rounded, 1 * MiB) << n << ": a remainder worth a block of its own was kept";
    block_bytes += static_cast<std::int64_t>(size);
    requested += static_cast<std::int64_t>(n);
    live.push_back(p);
  }
  auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, block_bytes);
  EXPECT_EQ(s.requested_bytes.current, requested);
  EXPECT_EQ(s.allocation_count.current, static_cast<std::int64_t>(std::size(sizes)));
  a->deallocate(nullptr);
  EXPECT_EQ(a->stats().allocation_count.current, s.allocation_count.current);
  for (void* p : live) a->deallocate(p);
  s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
}

// Through random allocations and frees on two streams: reserved >= active >= allocated, reserved
// = active + cached free bytes, the counters add up to the live blocks and peaks are never below
// their current values. Once everything is freed the counts are back to zero and the memory
// stays cached.
TEST_P(AllocatorContract, StatsStayConsistentAndReturnToZeroAfterFree) {
  auto a = make();
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> log2_size(0.0, 25.0);  // 1 B .. 32 MiB
  std::vector<contract_block> live;
  for (int op = 0; op < 400; ++op) {
    if (live.empty() || (live.size() < 24 && rng() % 3 != 0)) {
      const auto n = static_cast<std::size_t>(std::exp2(log2_size(rng)));
      const stream_handle s = stream(rng() % 2);
      live.push_back({a->allocate(n, s), n, s, {}});
    } else {
      const std::size_t k = rng() % live.size();
      a->deallocate(live[k].p);
      live[k] = live.back();
      live.pop_back();
    }
    std::int64_t block_bytes = 0, requested = 0;
    for (const auto& b : live) {
      block_bytes += static_cast<std::int64_t>(a->block_size(b.p));
      requested += static_cast<std::int64_t>(b.requested);
    }
    const auto s = a->stats();
    ASSERT_EQ(s.allocated_bytes.current, block_bytes) << "op " << op;
    ASSERT_EQ(s.requested_bytes.current, requested) << "op " << op;
    ASSERT_EQ(s.allocation_count.current, static_cast<std::int64_t>(live.size())) << "op " << op;
    ASSERT_GE(s.active_bytes.current, s.allocated_bytes.current) << "op " << op;
    ASSERT_GE(s.reserved_bytes.current, s.active_bytes.current) << "op " << op;
    ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.current),
              static_cast<std::size_t>(s.active_bytes.current) + s.cached_free_bytes)
        << "op " << op;
    for (const memory_stat* st : {&s.allocated_bytes, &s.requested_bytes, &s.reserved_bytes,
                                  &s.active_bytes, &s.allocation_count, &s.segment_count})
      ASSERT_GE(st->peak, st->current) << "op " << op;
  }
  const auto before = a->stats();
  for (const auto& b : live) a->deallocate(b.p);
  const auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  EXPECT_EQ(s.active_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  EXPECT_EQ(s.allocation_count.allocated, s.allocation_count.freed);
  EXPECT_EQ(s.allocated_bytes.allocated, s.allocated_bytes.freed);
  EXPECT_EQ(s.requested_bytes.allocated, s.requested_bytes.freed);
  EXPECT_GT(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, before.reserved_bytes.current);  // freeing keeps it cached
  EXPECT_EQ(static_cast<std::size_t>(s.reserved_bytes.current), s.cached_free_bytes);
  EXPECT_EQ(s.allocated_bytes.peak, before.allocated_bytes.peak);
}

// empty_cache gives every cached byte back to the backend (its free memory grows by them) and
// leaves the allocator usable; a live block and its data stay.
TEST_P(AllocatorContract, EmptyCacheReturnsCachedSegmentsToTheBackend) {
  auto be = h_->make_backend();
  const std::size_t slack = h_->memory_info_slack();
  const std::size_t free_at_start = be->memory_info().first;
  caching_allocator a(be, options());
  std::vector<contract_block> blocks;
  const std::size_t sizes[] = {4 * KiB, 300 * KiB, 1 * MiB, 6 * MiB, 24 * MiB, 45 * MiB};
  for (std::size_t i = 0; i < 2 * std::size(sizes); ++i) {
    const std::size_t n = sizes[i % std::size(sizes)];
    const stream_handle s = stream(i % 2);
    void* p = a.allocate(n, s);
    blocks.push_back({p, n, s, fill(p, n, 300 + i, s)});
  }
  for (const auto& b : blocks) a.deallocate(b.p);
  const auto cached = a.stats();
  ASSERT_GT(cached.reserved_bytes.current, 0);
  const auto reserved = static_cast<std::size_t>(cached.reserved_bytes.current);
  const std::size_t free_before = be->memory_info().first;
  EXPECT_LE(free_before, free_at_start - reserved + slack);  // the cache holds its memory
  const auto rep = a.empty_cache();
  EXPECT_EQ(rep.released_bytes, reserved);
  EXPECT_EQ(rep.kept_bytes, 0u);
  EXPECT_EQ(rep.kept_in_use_segments, 0u);
  EXPECT_EQ(rep.kept_pending_segments, 0u);
  auto s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.cached_free_bytes, 0u);
  EXPECT_TRUE(a.segments().empty());
  const std::size_t free_after = be->memory_info().first;
  EXPECT_GE(free_after + slack, free_before + reserved);
  EXPECT_GE(free_after + slack, free_at_start);
  // Usable again; a live block keeps its segment and its data through empty_cache.
  void* keep = a.allocate(5 * MiB, stream(0));
  const auto data = fill(keep, 5 * MiB, 399, stream(0));
  a.deallocate(a.allocate(30 * MiB, stream(1)));
  const auto rep2 = a.empty_cache();
  EXPECT_GT(rep2.released_bytes, 0u);
  EXPECT_GE(rep2.kept_bytes, a.block_size(keep));
  EXPECT_EQ(mismatches(keep, data, stream(0)), 0u);
  a.deallocate(keep);
  (void)a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
}

// A freed block serves the next request of its size on its own stream, without new memory; on
// another stream it is not handed out.
TEST_P(AllocatorContract, FreedBlocksAreReusedOnTheirOwnStreamOnly) {
  auto a = make();
  for (std::size_t n : {4 * KiB, 1 * MiB, 4 * MiB, 30 * MiB}) {
    void* p = a->allocate(n, stream(0));
    (void)fill(p, n, n, stream(0));
    a->deallocate(p);
    void* other = a->allocate(n, stream(1));
    EXPECT_NE(other, p) << n << ": a block of stream 0 handed out on stream 1";
    const auto before = a->stats();
    void* again = a->allocate(n, stream(0));
    EXPECT_EQ(again, p) << n;
    const auto after = a->stats();
    EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current) << n;
    EXPECT_EQ(after.device_allocations, before.device_allocations) << n;
    const auto data = fill(again, n, n + 1, stream(0));
    EXPECT_EQ(mismatches(again, data, stream(0)), 0u) << n;
    a->deallocate(other);
    a->deallocate(again);
  }
}

// Requests up to 1 MiB (rounded) come from small-pool segments, larger ones from large-pool
// segments; a cached large block does not serve a small request.
TEST_P(AllocatorContract, SmallAndLargeRequestsComeFromSeparatePools) {
  auto a = make();
  for (std::size_t n : {512 * KiB, 1 * MiB, 1 * MiB + 1, 4 * MiB}) {
    void* p = a->allocate(n, stream(0));
    const segment_view seg = segment_of(*a, p);
    ASSERT_GT(seg.total_size, 0u) << n << ": no segment holds the block";
    EXPECT_EQ(seg.small, is_small_request(round_request(n, options()))) << n;
    a->deallocate(p);
  }
  void* large = a->allocate(4 * MiB, stream(0));
  const std::uintptr_t large_begin = address(large), large_end = large_begin + 4 * MiB;
  a->deallocate(large);  // cached, on stream 0
  void* small = a->allocate(64 * KiB, stream(0));
  EXPECT_TRUE(address(small) < large_begin || address(small) >= large_end)
      << "a small request was carved out of a cached large block";
  EXPECT_TRUE(segment_of(*a, small).small);
  void* large_again = a->allocate(2 * MiB, stream(0));
  EXPECT_FALSE(segment_of(*a, large_again).small);
  const auto data = fill(small, 64 * KiB, 5, stream(0));
  const auto data2 = fill(large_again, 2 * MiB, 6, stream(0));
  EXPECT_EQ(mismatches(small, data, stream(0)), 0u);
  EXPECT_EQ(mismatches(large_again, data2, stream(0)), 0u);
  a->deallocate(small);
  a->deallocate(large_again);
}

// Segments are expandable exactly when the options ask for it and the backend has virtual
// memory; either way blocks across both pools and page boundaries, some of them growing the
// ranges while others live, hold their data; freeing every other block and emptying the cache
// gives memory back and keeps the others' data.
TEST_P(AllocatorContract, SegmentsGrowAndShrinkAroundLiveBlocks) {
  auto be = h_->make_backend();
  const bool expandable = options().expandable_segments && be->supports_virtual_memory();
  caching_allocator a(be, options());
  const std::size_t sizes[] = {1000, 300 * KiB, 1 * MiB, 7 * MiB, 19 * MiB, 45 * MiB};
  std::vector<contract_block> blocks;
  for (std::size_t round = 0; round < 3; ++round)
    for (std::size_t n : sizes) {
      n += round * 4096;
      const stream_handle s = stream(blocks.size() % 2);
      void* p = a.allocate(n, s);
      blocks.push_back({p, n, s, fill(p, n, 500 + blocks.size(), s)});
    }
  std::size_t listed = 0;
  for (const auto& sv : a.segments()) {
    EXPECT_EQ(sv.expandable, expandable) << "segment at " << sv.ptr;
    listed += sv.total_size;
  }
  EXPECT_EQ(listed, static_cast<std::size_t>(a.stats().reserved_bytes.current));
  if (expandable) {
    EXPECT_EQ(listed % (2 * MiB), 0u);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i)
    ASSERT_EQ(mismatches(blocks[i].p, blocks[i].data, blocks[i].stream), 0u) << i;
  for (std::size_t i = 0; i < blocks.size(); i += 2) a.deallocate(blocks[i].p);
  const auto before = a.stats().reserved_bytes.current;
  const auto rep = a.empty_cache();
  EXPECT_GT(rep.released_bytes, 0u);
  EXPECT_EQ(a.stats().reserved_bytes.current,
            before - static_cast<std::int64_t>(rep.released_bytes));
  for (std::size_t i = 1; i < blocks.size(); i += 2)
    ASSERT_EQ(mismatches(blocks[i].p, blocks[i].data, blocks[i].stream), 0u) << i;
  // The freed places serve again, and the data of both stays apart.
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    blocks[i].p = a.allocate(blocks[i].requested, blocks[i].stream);
    blocks[i].data = fill(blocks[i].p, blocks[i].requested, 700 + i, blocks[i].stream);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i)
    ASSERT_EQ(mismatches(blocks[i].p, blocks[i].data, blocks[i].stream), 0u) << i;
  for (const auto& b : blocks) a.deallocate(b.p);
  (void)a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
}

// Random data written into blocks of every size class on two streams reads back intact, round
// after round; the rounds after the first are served from the cache.
TEST_P(AllocatorContract, RandomDataReadsBackIntact) {
  auto a = make();
  const std::size_t sizes[] = {1, 511, 512, 4097, 1 * MiB, 1 * MiB + 1, 5 * MiB, 33 * MiB};
  std::int64_t first_round_allocations = 0;
  for (std::uint64_t round = 0; round < 3; ++round) {
    std::vector<contract_block> blocks;
    for (int k = 0; k < 3; ++k)
      for (std::size_t n : sizes) {
        const stream_handle s = stream(k % 2);
        void* p = a->allocate(n, s);
        blocks.push_back({p, n, s, fill(p, n, round * 1000 + blocks.size(), s)});
      }
    for (std::size_t i = 0; i < blocks.size(); ++i)
      ASSERT_EQ(mismatches(blocks[i].p, blocks[i].data, blocks[i].stream), 0u)
          << "round " << round << ", block " << i;
    for (const auto& b : blocks) a->deallocate(b.p);
    if (round == 0) first_round_allocations = a->stats().device_allocations;
  }
  const auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.device_allocations, first_round_allocations) << "rounds 2 and 3 took new memory";
  EXPECT_GT(a->empty_cache().released_bytes, 0u);
}

// Running out of memory (a request beyond the backend's total, beyond any size, or past the
// reserved limit) is an out_of_memory naming the request, the allocator's state and the
// backend's memory; nothing changes, and the allocator goes on serving with its data intact.
TEST_P(AllocatorContract, OutOfMemoryIsTypedAndLeavesTheAllocatorUsable) {
  auto a = make();
  void* keep = a->allocate(64 * MiB, stream(0));
  const auto data = fill(keep, 64 * MiB, 77, stream(0));
  const std::size_t total = a->backend().memory_info().second;
  const std::size_t too_big = 2 * total + 2 * MiB;
  try {
    (void)a->allocate(too_big, stream(0));
    FAIL() << "allocated twice the backend's memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested_bytes(), too_big);
    EXPECT_NE(m.find("64.0 MiB allocated"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string(a->backend().name()) + " memory:"), std::string::npos) << m;
  }
  auto s = a->stats();
  EXPECT_EQ(s.ooms, 1);
  EXPECT_EQ(s.allocation_count.current, 1);
  EXPECT_EQ(s.allocated_bytes.current, static_cast<std::int64_t>(64 * MiB));
  // Sizes whose rounding would wrap around.
  for (std::size_t n : {SIZE_MAX, SIZE_MAX - 100}) {
    try {
      (void)a->allocate(n, stream(1));
      FAIL() << n << " bytes allocated";
    } catch (const out_of_memory& e) {
      EXPECT_EQ(e.requested_bytes(), n);
    }
  }
  EXPECT_EQ(a->stats().allocation_count.current, 1);
  // The reserved limit.
  a->set_reserved_limit(static_cast<std::size_t>(a->stats().reserved_bytes.current) + 8 * MiB);
  try {
    (void)a->allocate(32 * MiB, stream(1));
    FAIL() << "allocated past the reserved limit";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested_bytes(), 32 * MiB);
    EXPECT_NE(std::string(e.what()).find("reserved limit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a->stats().ooms, 2);
  a->set_reserved_limit(SIZE_MAX);
  // Still usable, and what it held is intact.
  void* more = a->allocate(32 * MiB, stream(1));
  const auto more_data = fill(more, 32 * MiB, 78, stream(1));
  EXPECT_EQ(mismatches(more, more_data, stream(1)), 0u);
  EXPECT_EQ(mismatches(keep, data, stream(0)), 0u);
  a->deallocate(more);
  a->deallocate(keep);
  s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
}

// A pointer that is not a live allocation (never handed out, inside a block, freed already) is
// a logic_error for every call that takes one, and changes nothing.
TEST_P(AllocatorContract, UnknownPointersAreRejected) {
  auto a = make();
  int x = 0;
  EXPECT_THROW(a->deallocate(&x), logic_error);
  EXPECT_THROW(a->record_stream(&x, stream(1)), logic_error);
  EXPECT_THROW((void)a->block_size(&x), logic_error);
  void* p = a->allocate(100, stream(0));
  EXPECT_THROW(a->deallocate(static_cast<char*>(p) + 512), logic_error);
  EXPECT_EQ(a->stats().allocation_count.current, 1);
  a->deallocate(p);
  EXPECT_THROW(a->deallocate(p), logic_error);  // double free
  EXPECT_THROW(a->record_stream(p, stream(1)), logic_error);
  EXPECT_EQ(a->stats().allocation_count.current, 0);
  void* q = a->allocate(100, stream(0));
  const auto data = fill(q, 100, 9, stream(0));
  EXPECT_EQ(mismatches(q, data, stream(0)), 0u);
  a->deallocate(q);
}

// A block used on another stream (record_stream) is counted free at once, stays active until
// that stream's work is done, and is reused on its own stream after the backend synchronises.
TEST_P(AllocatorContract, RecordStreamedBlocksAreReusedOnceTheStreamsAreDone) {
  auto a = make();
  void* p = a->allocate(4 * MiB, stream(0));
  (void)fill(p, 4 * MiB, 41, stream(0));
  a->record_stream(p, stream(1));
  a->record_stream(p, stream(0));  // its own stream: nothing to wait for
  a->deallocate(p);
  auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  a->backend().synchronize();
  void* q = a->allocate(4 * MiB, stream(0));
  EXPECT_EQ(q, p);
  s = a->stats();
  EXPECT_EQ(s.active_bytes.current, s.allocated_bytes.current);
  const auto data = fill(q, 4 * MiB, 42, stream(0));
  EXPECT_EQ(mismatches(q, data, stream(0)), 0u);
  a->deallocate(q);
  (void)a->empty_cache();
  s = a->stats();
  EXPECT_EQ(s.active_bytes.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, 0);
}

// Peaks follow the current values; reset_peak_stats brings them down to them and keeps totals.
TEST_P(AllocatorContract, PeakStatsFollowCurrentAndReset) {
  auto a = make();
  void* x = a->allocate(8 * MiB, stream(0));
  void* y = a->allocate(8 * MiB, stream(0));
  a->deallocate(y);
  EXPECT_EQ(a->stats().allocated_bytes.peak, static_cast<std::int64_t>(16 * MiB));
  a->reset_peak_stats();
  auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(s.allocated_bytes.allocated, static_cast<std::int64_t>(16 * MiB));  // totals stay
  EXPECT_EQ(s.reserved_bytes.peak, s.reserved_bytes.current);
  void* z = a->allocate(1 * MiB, stream(0));
  EXPECT_EQ(a->stats().allocated_bytes.peak, static_cast<std::int64_t>(9 * MiB));
  a->deallocate(x);
  a->deallocate(z);
  EXPECT_EQ(a->stats().allocated_bytes.peak, static_cast<std::int64_t>(9 * MiB));
}

// Threads that allocate, write, check and free at once, each on a stream of its own, never get
// one another's blocks; their data stays theirs, and every count is back to zero at the end.
TEST_P(AllocatorContract, ThreadsGetBlocksOfTheirOwn) {
  auto a = make();
  std::atomic<std::size_t> bad{0}, failures{0};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kStreams; ++t)
    threads.emplace_back([&, t] {
      try {
        std::mt19937_64 rng(31 + t);
        std::uniform_real_distribution<double> log2_size(0.0, 22.0);  // 1 B .. 4 MiB
        const stream_handle s = stream(t);
        std::vector<contract_block> mine;
        for (int op = 0; op < 150; ++op) {
          if (mine.empty() || (mine.size() < 8 && rng() % 2)) {
            const auto n = static_cast<std::size_t>(std::exp2(log2_size(rng)));
            void* p = a->allocate(n, s);
            mine.push_back({p, n, s, fill(p, n, (t << 32) + static_cast<std::uint64_t>(op), s)});
          } else {
            const std::size_t k = rng() % mine.size();
            bad += mismatches(mine[k].p, mine[k].data, s);
            a->deallocate(mine[k].p);
            mine[k] = std::move(mine.back());
            mine.pop_back();
          }
        }
        for (const auto& b : mine) {
          bad += mismatches(b.p, b.data, s);
          a->deallocate(b.p);
        }
      } catch (...) {
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(bad.load(), 0u) << "a block's data was overwritten: handed to two threads";
  const auto s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation_count.current, 0);
  EXPECT_EQ(s.allocation_count.allocated, s.allocation_count.freed);
  (void)a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0);
}

}  // namespace gpu_basics::contract

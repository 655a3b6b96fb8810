// The replay engine (trace_replayer) and the allocator's exported rules that snapshot analysis
// calls instead of copying: the oversize rule, the large page, block states.
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"

namespace gb = gpu_basics;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
using ev = gb::replay_event;

ev alloc(std::uint64_t id, std::size_t bytes) {
  return {ev::op::alloc, id, bytes, 0};
}
ev release(std::uint64_t id) {
  return {ev::op::free, id, 0, 0};
}

}  // namespace

TEST(ReplayEngine, CountsLiveBytesAsTheTraceGoes) {
  const std::vector<ev> trace = {alloc(1, 1000),    alloc(2, 3 * MiB), release(1),
                                 release(7),         // never allocated: nothing happens
                                 alloc(2, 5 * MiB),  // allocated again: the first block leaks
                                 release(2)};
  const gb::prepared_trace p = gb::prepare_trace(trace);
  gb::trace_replayer r(p, {}, {}, /*count_allocated=*/true);
  ASSERT_EQ(r.events(), trace.size());
  EXPECT_NE(r.step(0), nullptr);
  EXPECT_EQ(r.requested(), 1000u);
  EXPECT_EQ(r.allocated(), 1024u);  // rounded to 512
  EXPECT_NE(r.step(1), nullptr);
  EXPECT_EQ(r.requested(), 1000u + 3 * MiB);
  EXPECT_EQ(r.step(2), nullptr);
  EXPECT_EQ(r.requested(), 3 * MiB);
  EXPECT_EQ(r.step(3), nullptr);
  EXPECT_EQ(r.requested(), 3 * MiB);
  EXPECT_NE(r.step(4), nullptr);
  EXPECT_EQ(r.requested(), 8 * MiB);  // the leaked 3 MiB is still allocated
  EXPECT_EQ(r.allocator().stats().allocated_bytes.current, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(r.step(5), nullptr);
  EXPECT_EQ(r.requested(), 3 * MiB);
  EXPECT_GE(r.reserved(), 8 * MiB);
  // Without count_allocated, allocated() stays 0 (no block-size lookups).
  gb::trace_replayer quiet(p, {});
  (void)quiet.step(0);
  EXPECT_EQ(quiet.allocated(), 0u);
  EXPECT_EQ(quiet.requested(), 1000u);
}

TEST(ReplayEngine, ReplayOptionsDropTheHistoryAndReleaseEagerly) {
  gb::allocator_options o;
  o.history_capacity = 100;
  o.release_pages = gb::page_release::deferred;
  const auto r = gb::replay_options(o);
  EXPECT_EQ(r.history_capacity, 0u);
  EXPECT_EQ(r.release_pages, gb::page_release::eager);
  o.release_pages = gb::page_release::keep;
  EXPECT_EQ(gb::replay_options(o).release_pages, gb::page_release::keep);
}

TEST(ReplayEngine, ReplayTraceIsTheEngineRun) {
  const std::vector<ev> trace = gb::mixed_trace(2000, 3);
  const gb::prepared_trace p = gb::prepare_trace(trace);
  const auto whole = gb::replay_trace(trace, {});
  const auto prepared = gb::replay_trace(p, {});
  EXPECT_EQ(whole.peak_reserved, prepared.peak_reserved);
  EXPECT_EQ(whole.peak_requested, p.peak_requested);
  // The engine's own loop sees the same peak.
  gb::trace_replayer r(p, {});
  std::size_t peak = 0;
  for (std::size_t i = 0; i < r.events(); ++i) {
    (void)r.step(i);
    peak = std::max(peak, r.reserved());
  }
  EXPECT_EQ(peak, whole.peak_reserved);
  EXPECT_GT(peak, 0u);
}

TEST(AllocatorRules, OversizeRuleIsTheOneTheAllocatorApplies) {
  gb::allocator_options o;
  EXPECT_FALSE(gb::oversize_block_refused(1ull << 40, 512, o));  // no max_split_size: none
  o.max_split_size = 32 * MiB;
  EXPECT_TRUE(gb::oversize_block_refused(40 * MiB, 2 * MiB, o));   // small request, big block
  EXPECT_FALSE(gb::oversize_block_refused(30 * MiB, 2 * MiB, o));  // below max_split_size
  EXPECT_FALSE(gb::oversize_block_refused(40 * MiB + gb::kOversizeSlack - 1, 40 * MiB, o));
  EXPECT_TRUE(gb::oversize_block_refused(40 * MiB + gb::kOversizeSlack, 40 * MiB, o));
  // The allocator agrees: a free 40 MiB block does not serve 12 MiB under max_split_size 32 MiB
  // (a new segment is made), and does without the rule.
  for (const bool rule : {true, false}) {
    gb::allocator_options opts;
    if (rule) opts.max_split_size = 32 * MiB;
    auto device = gb::simulated_device();
    gb::caching_allocator a(device, opts);
    void* big = a.allocate(40 * MiB);
    a.deallocate(big);
    const std::size_t before = device->used();
    void* p = a.allocate(12 * MiB);
    EXPECT_EQ(device->used() > before, rule) << rule;
    a.deallocate(p);
  }
  EXPECT_EQ(gb::kLargePageBytes, 2 * MiB);
  EXPECT_EQ(gb::segment_size_for(30 * MiB) % gb::kLargePageBytes, 0u);
}

TEST(AllocatorRules, BlockStatesAreNamedAsPyTorchNamesThem) {
  EXPECT_EQ(gb::to_string(gb::block_state::active_allocated), "active_allocated");
  EXPECT_EQ(gb::to_string(gb::block_state::active_pending_free), "active_pending_free");
  EXPECT_EQ(gb::to_string(gb::block_state::inactive), "inactive");
  auto device = gb::simulated_device();
  gb::caching_allocator a(device, {});
  void* p = a.allocate(1000);
  const auto segs = a.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 2u);  // the block and the segment's free rest
  EXPECT_EQ(segs[0].blocks[0].state, gb::block_state::active_allocated);
  EXPECT_EQ(segs[0].blocks[1].state, gb::block_state::inactive);
  a.deallocate(p);
}

TEST(AllocatorRules, SimulatedDevicePlacesSegmentsAsAsked) {
  auto up = gb::simulated_device();
  auto down = gb::simulated_device({gb::address_order::descending, 0});
  void* a1 = up->allocate(2 * MiB);
  void* a2 = up->allocate(2 * MiB);
  void* d1 = down->allocate(2 * MiB);
  void* d2 = down->allocate(2 * MiB);
  EXPECT_LT(a1, a2);
  EXPECT_GT(d1, d2);
  EXPECT_TRUE(up->supports_virtual_memory());
  up->deallocate(a1, 2 * MiB);
  up->deallocate(a2, 2 * MiB);
  down->deallocate(d1, 2 * MiB);
  down->deallocate(d2, 2 * MiB);
}

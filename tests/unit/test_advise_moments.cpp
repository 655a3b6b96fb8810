// advise's moments of a replay: the stranded splits at the first peaks of reserved and of
// allocated, and the events that grew reserved beyond what the live blocks needed, on traces
// whose answers are known by construction.
#include <vector>

#include <gtest/gtest.h>

#include "gpu_basics/snapshot/advise.hpp"

namespace gb = gpu_basics;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
using ev = gb::replay_event;

ev alloc(std::uint64_t id, std::size_t bytes, gb::stream_handle s = 0) {
  return {ev::op::alloc, id, bytes, s};
}
ev release(std::uint64_t id, gb::stream_handle s = 0) {
  return {ev::op::free, id, 0, s};
}

}  // namespace

TEST(AdviseMoments, AnotherStreamsCacheGrowsReservedBeyondNeed) {
  // Stream 1 takes 30 MiB and frees it; stream 2 then asks 30 MiB: the free 30 MiB are cached
  // for stream 1, so a second segment is taken while live blocks need only 30 MiB. Then 8 MiB
  // more on stream 2 (peak allocated, 38 MiB) take a fresh 20 MiB segment: beyond need too.
  const std::vector<ev> events = {alloc(1, 30 * MiB, 1), release(1, 1), alloc(2, 30 * MiB, 2),
                                  alloc(3, 8 * MiB, 2),  release(3, 2), release(2, 2)};
  const auto trace = gb::prepare_trace(events);
  const auto m = gb::moments_of(trace, {}, 5);
  EXPECT_EQ(m.peak_reserved_event, 3u);   // 30 + 30 + 20 MiB
  EXPECT_EQ(m.peak_allocated_event, 3u);  // 38 MiB
  EXPECT_EQ(m.at_peak_reserved.reserved, 80 * MiB);
  EXPECT_EQ(m.at_peak_reserved.bytes_of(gb::stranded_cause::other_stream), 30 * MiB);
  EXPECT_EQ(m.at_peak_reserved.bytes_of(gb::stranded_cause::segment_rest), 12 * MiB);
  ASSERT_EQ(m.growth.size(), 2u);
  EXPECT_EQ(m.growth[0].event, 2u);
  EXPECT_EQ(m.growth[0].grew_bytes, 30 * MiB);
  EXPECT_EQ(m.growth[0].excess_bytes, 30 * MiB);  // reserved 60 after, 30 before and needed
  EXPECT_EQ(m.growth[0].free_before, 30 * MiB);
  EXPECT_EQ(m.growth[0].cause, gb::stranded_cause::other_stream);
  EXPECT_EQ(m.growth[1].event, 3u);
  EXPECT_EQ(m.growth[1].excess_bytes, 80 * MiB - 60 * MiB);  // 60 before > 38 allocated
  EXPECT_EQ(m.growth_total, 50 * MiB);
  // The largest only, when fewer are asked for; the total still counts them all.
  const auto one = gb::moments_of(trace, {}, 1);
  ASSERT_EQ(one.growth.size(), 1u);
  EXPECT_EQ(one.growth[0].event, 2u);
  EXPECT_EQ(one.growth_total, 50 * MiB);
}

TEST(AdviseMoments, PeakAllocatedComesBeforePeakReservedWhenTheCacheGrowsLater) {
  // 40 MiB live at event 1, then all freed; a 30 MiB request fits neither cached 20 MiB block
  // (too small): reserved peaks later than allocated.
  const std::vector<ev> events = {alloc(1, 20 * MiB), alloc(2, 20 * MiB), release(1),
                                  release(2),         alloc(3, 30 * MiB), release(3)};
  const auto trace = gb::prepare_trace(events);
  const auto m = gb::moments_of(trace, {}, 5);
  EXPECT_EQ(m.peak_allocated_event, 1u);
  EXPECT_EQ(m.peak_reserved_event, 4u);
  EXPECT_EQ(m.at_peak_allocated.allocated, 40 * MiB);
  EXPECT_EQ(m.at_peak_allocated.reserved, 40 * MiB);
  EXPECT_EQ(m.at_peak_reserved.reserved, 70 * MiB);
  EXPECT_EQ(m.at_peak_reserved.bytes_of(gb::stranded_cause::too_small), 40 * MiB);
  ASSERT_EQ(m.growth.size(), 1u);
  EXPECT_EQ(m.growth[0].event, 4u);
  EXPECT_EQ(m.growth[0].excess_bytes, 30 * MiB);  // 40 MiB were free, but in 20 MiB pieces
  EXPECT_EQ(m.growth[0].cause, gb::stranded_cause::too_small);
}

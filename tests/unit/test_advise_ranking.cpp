// advise's choice without --fit, checked against replays made here: each policy's outcome is its
// own replay (policies whose replays are the same are replayed once), and the recommendation is
// the policy of the lowest peak under the worst placement of segments, not under the replay's
// ascending addresses alone.
#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gb = gpu_basics;

namespace {

using ev = gb::replay_event;

std::size_t page_up(std::size_t n) {
  return (n + gb::kAdvicePage - 1) / gb::kAdvicePage * gb::kAdvicePage;
}

/// The most a policy reserves without a limit, over advise's placements of segments.
std::size_t worst_peak(const gb::prepared_trace& t, const gb::allocator_options& o) {
  std::size_t worst = 0;
  for (const auto& q : gb::advise_placements())
    worst = std::max(worst, gb::replay_under_limit(t, o, SIZE_MAX, q).peak_reserved);
  return worst;
}

}  // namespace

TEST(AdviseRanking, EveryPolicysOutcomeIsItsOwnReplay) {
  // Random requests of at most 32 MiB, and among them a few of 90 MiB: max_split_size_mb:64 acts
  // on those segments, 128 and above on none (such policies share the replay of the policy
  // without the key, except with expandable segments). Each outcome, without a limit and under
  // each, must still be what a replay of its own policy gives.
  auto events = gb::mixed_trace(6000, 3);
  for (std::uint64_t k = 0; k < 3; ++k) {
    const auto at = static_cast<std::ptrdiff_t>(1000 + 1500 * k);
    events.insert(events.begin() + at, {ev::op::alloc, 900 + k, 90 << 20, 0});
    // Freed, then a 40 MiB request: the defaults split the cached 90 MiB block for it, a
    // max_split_size of 64 MiB refuses that block to a smaller request and takes a new segment.
    events.insert(events.begin() + at + 400, {{ev::op::free, 900 + k, 0, 0},
                                              {ev::op::alloc, 950 + k, 40 << 20, 0},
                                              {ev::op::free, 950 + k, 0, 0}});
  }
  const auto s = gb::torch_snapshot_of(events);
  const gb::snapshot_trace st(s, "mixed", 0);
  const auto policies = gb::advise_policies({}, true);
  const std::size_t live = st.prepared.peak_requested;
  const std::vector<std::size_t> limits = {live + (live / 20), live + (live / 5)};
  const gb::advice a = gb::advise_snapshot(s, "mixed", 0, policies, limits, 2);
  ASSERT_EQ(a.policies.size(), policies.size());
  std::size_t with_split = 0;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    ASSERT_TRUE(a.policies[i].result) << policies[i].conf;
    const gb::replay_result own = gb::replay_trace(st.prepared, policies[i].options);
    EXPECT_EQ(a.policies[i].result->peak_reserved, own.peak_reserved) << policies[i].conf;
    EXPECT_EQ(a.policies[i].result->backend_allocations, own.backend_allocations)
        << policies[i].conf;
    EXPECT_EQ(a.policies[i].conf, policies[i].conf);
    ASSERT_EQ(a.policies[i].fits.size(), limits.size());
    for (std::size_t k = 0; k < limits.size(); ++k) {
      const gb::fit_outcome f = gb::replay_under_limit(st.prepared, policies[i].options, limits[k]);
      EXPECT_EQ(a.policies[i].fits[k].fits(), f.fits()) << policies[i].conf << " " << limits[k];
      EXPECT_EQ(a.policies[i].fits[k].peak_reserved, f.peak_reserved) << policies[i].conf;
    }
    with_split += policies[i].conf.find("max_split_size_mb") != std::string::npos;
  }
  EXPECT_EQ(with_split, 120u);  // 5 sizes x 4 roundings x 2 (plain, expandable) x 3 (gc)
  // The 90 MiB segments make max_split_size_mb:64 a policy of its own.
  const auto allocations_of = [&](const std::string& conf) {
    for (const auto& p : a.policies)
      if (p.conf == conf) return p.result->backend_allocations;
    ADD_FAILURE() << conf;
    return std::int64_t{0};
  };
  EXPECT_NE(allocations_of("max_split_size_mb:64"), allocations_of(""));
  EXPECT_EQ(allocations_of("max_split_size_mb:128"), allocations_of(""));
}

TEST(AdviseRanking, TheRecommendationHasTheLowestPeakUnderTheWorstPlacement) {
  // On random traces, against the candidates advise ranks (the defaults and the policies of the
  // lowest peaks with ascending addresses): none has a lower worst peak (in pages) than the
  // recommendation. Some of these traces' lowest ascending peak is not the lowest worst one.
  std::size_t differ = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const auto s = gb::torch_snapshot_of(gb::mixed_trace(3000, seed));
    const gb::snapshot_trace st(s, "mixed", 0);
    const auto policies = gb::advise_policies({});
    const gb::advice a = gb::advise_snapshot(s, "mixed", 0, policies, {}, 2);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < a.policies.size(); ++i) order.push_back(i);
    const auto key = [&](std::size_t i) {
      return std::tuple(page_up(a.policies[i].result->peak_reserved), a.policies[i].knobs,
                        a.policies[i].result->peak_reserved, i);
    };
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
    const std::size_t rec = page_up(worst_peak(st.prepared, policies[a.recommended].options));
    EXPECT_EQ(page_up(*std::max_element(a.recommendation.peak_by_placement.begin(),
                                        a.recommendation.peak_by_placement.end())),
              rec)
        << "seed " << seed;
    EXPECT_LE(rec, page_up(worst_peak(st.prepared, policies[0].options))) << "seed " << seed;
    EXPECT_LE(rec, page_up(worst_peak(st.prepared, policies[order.front()].options)))
        << "seed " << seed << ": " << policies[order.front()].conf;
    differ += order.front() != a.recommended;
  }
  EXPECT_GT(differ, 0u) << "no trace tells the worst placement from the ascending one";
}

TEST(AdviseRanking, APolicyThatRunsOutOfMemoryUnderAPlacementIsNotRecommended) {
  // A 12 MiB segment, then a 24 MiB one split in two; of two free 12 MiB blocks the lower address
  // is taken. With ascending addresses that is the first segment's, the 24 MiB segment then
  // merges whole and the last 24 MiB request fits in it: 36 MiB at peak. Under descending
  // addresses the 24 MiB segment lies lower, stays split, and the last request needs a new
  // segment (60 MiB, or 48 under a limit). per_process_memory_fraction:0.5 of 72 MiB (a 36 MiB
  // limit) fits with ascending addresses only: it must not rank as a 36 MiB peak everywhere.
  const std::vector<ev> events = {{ev::op::alloc, 4, 12 << 20, 0}, {ev::op::alloc, 1, 24 << 20, 0},
                                  {ev::op::free, 1, 0, 0},         {ev::op::alloc, 2, 12 << 20, 0},
                                  {ev::op::alloc, 3, 12 << 20, 0}, {ev::op::free, 3, 0, 0},
                                  {ev::op::free, 4, 0, 0},         {ev::op::alloc, 5, 12 << 20, 0},
                                  {ev::op::free, 2, 0, 0},         {ev::op::alloc, 6, 24 << 20, 0}};
  const auto s = gb::torch_snapshot_of(events);
  const gb::snapshot_trace st(s, "tie", 0);
  const std::string fraction = "per_process_memory_fraction:0.5";
  // The defaults and that policy alone: without the placements it would win (36 against 60 MiB).
  const auto policies =
      gb::policy_list({""}, {fraction}, gb::repeated_policy::skip, std::size_t{72} << 20);
  ASSERT_EQ(policies.back().conf, fraction);
  const auto& o = policies.back().options;
  ASSERT_TRUE(gb::replay_under_limit(st.prepared, o, SIZE_MAX).fits());
  ASSERT_FALSE(
      gb::replay_under_limit(st.prepared, o, SIZE_MAX, {gb::address_order::descending, 0}).fits());
  const gb::advice a = gb::advise_snapshot(s, "tie", 0, policies, {}, 2);
  EXPECT_EQ(a.policies[a.recommended].conf, "");
  for (const auto& q : gb::advise_placements())
    EXPECT_TRUE(
        gb::replay_under_limit(st.prepared, policies[a.recommended].options, SIZE_MAX, q).fits())
        << q.name();
}

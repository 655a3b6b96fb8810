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

/// A snapshot whose device trace is `events` (ids as addresses, frees as free_requested).
gb::torch_snapshot snapshot_of(const std::vector<ev>& events) {
  gb::torch_snapshot s;
  s.device_traces.emplace_back();
  std::map<std::uint64_t, std::size_t> live;
  for (const ev& e : events) {
    gb::torch_trace_event t;
    t.addr = e.id;
    t.stream = static_cast<std::int64_t>(e.stream);
    if (e.kind == ev::op::alloc) {
      t.action = gb::torch_action::alloc;
      t.size = live[e.id] = e.bytes;
    } else {
      t.action = gb::torch_action::free_requested;
      t.size = live[e.id];
    }
    s.device_traces.back().push_back(t);
  }
  return s;
}

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
  // Requests of at most 32 MiB: every max_split_size_mb searched (64 MiB and more) is above the
  // largest segment, so those policies share the replay of the policy without it, except with
  // expandable segments; each outcome must still be what a replay of its own policy gives.
  const auto s = snapshot_of(gb::mixed_trace(6000, 3));
  const gb::snapshot_trace st(s, "mixed", 0);
  const auto policies = gb::advise_policies({});
  const gb::advice a = gb::advise_snapshot(s, "mixed", 0, policies, {}, 2);
  ASSERT_EQ(a.policies.size(), policies.size());
  std::size_t with_split = 0;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    ASSERT_TRUE(a.policies[i].result) << policies[i].conf;
    const gb::replay_result own = gb::replay_trace(st.prepared, policies[i].options);
    EXPECT_EQ(a.policies[i].result->peak_reserved, own.peak_reserved) << policies[i].conf;
    EXPECT_EQ(a.policies[i].result->backend_allocations, own.backend_allocations)
        << policies[i].conf;
    EXPECT_EQ(a.policies[i].conf, policies[i].conf);
    with_split += policies[i].conf.find("max_split_size_mb") != std::string::npos;
  }
  EXPECT_EQ(with_split, 40u);  // 5 sizes x 4 roundings x 2 (plain, expandable)
}

TEST(AdviseRanking, TheRecommendationHasTheLowestPeakUnderTheWorstPlacement) {
  // On random traces, against the candidates advise ranks (the defaults and the policies of the
  // lowest peaks with ascending addresses): none has a lower worst peak (in pages) than the
  // recommendation. Some of these traces' lowest ascending peak is not the lowest worst one.
  std::size_t differ = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const auto s = snapshot_of(gb::mixed_trace(3000, seed));
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

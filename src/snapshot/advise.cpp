// Advice from a snapshot's trace: replays under limits, the bisected smallest limit, the policy
// search (the sweep of policy_sweep.hpp, on a thread pool: each replay has its own allocator and
// simulated device) and the stranded split at peak. Presented by advise_present.cpp, written and
// read by advise_json.cpp.
#include "gpu_basics/snapshot/advise.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics {

namespace {

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

/// Keys set in a conf (the defaults: 0).
int knobs_of(const allocator_options& o) {
  const allocator_options d;
  int n = 0;
  n += o.max_split_size != d.max_split_size;
  n += o.roundup_power2_divisions != d.roundup_power2_divisions;
  n += o.garbage_collection_threshold != d.garbage_collection_threshold;
  n += o.expandable_segments != d.expandable_segments;
  n += o.release_pages != d.release_pages;
  n += o.per_process_memory_fraction != d.per_process_memory_fraction;
  return n;
}

/// Per policy, the first policy whose replays are the same as its own on `trace` (itself where
/// none before it is): without expandable segments no block outgrows the largest segment the
/// trace's largest request makes, and a max_split_size above that block changes nothing (it
/// governs only blocks of its size or more).
std::vector<std::size_t> same_replays(const prepared_trace& trace,
                                      const std::vector<allocator_options>& opts) {
  std::size_t largest = 0;
  for (const replay_event& e : *trace.trace)
    if (e.kind == replay_event::op::alloc) largest = std::max(largest, e.bytes);
  std::vector<allocator_options> plain;
  std::vector<std::size_t> same(opts.size());
  for (std::size_t i = 0; i < opts.size(); ++i) {
    allocator_options o = opts[i];
    if (!o.expandable_segments && segment_size_for(round_request(largest, o)) < o.max_split_size)
      o.max_split_size = allocator_options{}.max_split_size;
    plain.push_back(o);
    same[i] = static_cast<std::size_t>(std::find(plain.begin(), plain.end(), o) - plain.begin());
  }
  return same;
}

}  // namespace

std::string_view to_string(stranded_cause c) noexcept {
  switch (c) {
    case stranded_cause::other_stream:
      return "other stream";
    case stranded_cause::other_pool:
      return "other pool";
    case stranded_cause::expandable_pages:
      return "expandable pages";
    case stranded_cause::segment_rest:
      return "rest of new segment";
    case stranded_cause::max_split:
      return "max_split_size";
    case stranded_cause::too_small:
      return "too small";
    case stranded_cause::unexplained:
      break;
  }
  return "unexplained";
}

std::string advice::fit_label(std::size_t k) const {
  return k < fit_labels.size() && !fit_labels[k].empty() ? fit_labels[k]
                                                         : format_bytes(fit_limits.at(k));
}

std::optional<std::size_t> advice::tightest_fit() const {
  std::optional<std::size_t> k;
  for (std::size_t i = 0; i < fit_limits.size(); ++i)
    if (fit_choice[i] && (!k || fit_limits[i] < fit_limits[*k])) k = i;
  return k;
}

std::vector<std::string> advise_confs(bool collect) {
  std::vector<std::string> v;
  const std::vector<std::string> split = {"",
                                          "max_split_size_mb:64",
                                          "max_split_size_mb:128",
                                          "max_split_size_mb:256",
                                          "max_split_size_mb:512",
                                          "max_split_size_mb:1024"};
  const std::vector<std::string> round = {
      "", "roundup_power2_divisions:2", "roundup_power2_divisions:4", "roundup_power2_divisions:8"};
  const std::vector<std::string> expand = {"", "expandable_segments:True"};
  std::vector<std::string> gc = {""};
  if (collect)
    gc.insert(gc.end(), {"garbage_collection_threshold:0.6", "garbage_collection_threshold:0.8"});
  for (const auto& g : gc)
    for (const auto& e : expand)
      for (const auto& r : round)
        for (const auto& s : split) {
          std::string c;
          for (const std::string* k : {&s, &r, &e, &g})
            if (!k->empty()) c += (c.empty() ? "" : ",") + *k;
          v.push_back(std::move(c));
        }
  return v;
}

std::vector<replay_policy> advise_policies(const std::vector<std::string>& user, bool collect,
                                           std::optional<std::size_t> device_memory) {
  return policy_list(advise_confs(collect), user, repeated_policy::skip, device_memory);
}

std::vector<address_placement> advise_placements() {
  std::vector<address_placement> v = {{address_order::ascending, 0},
                                      {address_order::descending, 0}};
  for (std::uint64_t seed = 1; v.size() < kAdvicePlacements; ++seed)
    v.push_back({address_order::shuffled, seed});
  return v;
}

fit_outcome replay_under_limit(const prepared_trace& trace, const allocator_options& o,
                               std::size_t limit, address_placement placement) {
  allocator_options lo = o;
  lo.reserved_limit = std::min(o.reserved_limit, limit);  // a policy's own fraction may be lower
  trace_replayer r(trace, lo, placement);
  fit_outcome f;
  f.limit = limit;
  for (std::size_t i = 0; i < r.events(); ++i) {
    try {
      (void)r.step(i);
    } catch (const out_of_memory&) {
      const allocator_stats s = r.allocator().stats();
      const replay_event& e = r.event(i);
      f.oom = oom_point{i,
                        e.bytes,
                        e.stream,
                        static_cast<std::size_t>(s.allocated_bytes.current),
                        static_cast<std::size_t>(s.reserved_bytes.current),
                        s.largest_free_block,
                        {}};
      return f;
    }
    f.peak_reserved = std::max(f.peak_reserved, r.reserved());
  }
  return f;
}

std::size_t smallest_fitting_limit(const prepared_trace& trace, const allocator_options& o,
                                   std::size_t fitting, address_placement placement,
                                   bool fits_unlimited) {
  const std::size_t live = trace.peak_requested;
  if (live == 0) return 0;
  // lo never fits (below the live peak); hi fits.
  std::size_t lo = round_up(live, kAdvicePage) - kAdvicePage;
  std::size_t hi = std::max(round_up(fitting, kAdvicePage), lo + kAdvicePage);
  // A replay that fits under L with peak P is, without garbage collection (which the limit
  // sets off), the same replay under any limit from P to L: every request that passed L stayed
  // within P, every one refused passed L. So hi drops to the page above P.
  const bool collects = o.garbage_collection_threshold > 0;
  const auto tighter = [&](const fit_outcome& f) {
    return collects ? f.limit : std::max(round_up(f.peak_reserved, kAdvicePage), lo + kAdvicePage);
  };
  if (!fits_unlimited || collects || o.reserved_limit < fitting) {
    for (fit_outcome f; !(f = replay_under_limit(trace, o, hi, placement)).fits();) {
      lo = hi;                                     // said to fit, did not: widen
      if (hi > (std::size_t{1} << 45)) return hi;  // 32 TiB: give up widening
      hi *= 2;
    }
  }
  while (hi - lo > kAdvicePage) {
    const std::size_t mid = lo + (hi - lo) / kAdvicePage / 2 * kAdvicePage;
    const fit_outcome f = replay_under_limit(trace, o, mid, placement);
    if (f.fits())
      hi = std::min(mid, tighter(f));
    else
      lo = mid;
  }
  return hi;
}

usage_curve usage_over_trace(const prepared_trace& trace, const allocator_options& o,
                             std::size_t points) {
  usage_curve c;
  const std::size_t n = trace.trace->size();
  if (n == 0) return c;
  const std::size_t stretch = std::max<std::size_t>(1, (n + points - 1) / points);
  trace_replayer r(trace, o, {}, /*count_allocated=*/true);
  std::size_t res = 0, all = 0;
  for (std::size_t i = 0; i < n; ++i) {
    (void)r.step(i);
    res = std::max(res, r.reserved());
    all = std::max(all, r.allocated());
    if ((i + 1) % stretch == 0 || i + 1 == n) {
      c.event.push_back(i);
      c.reserved.push_back(res);
      c.allocated.push_back(all);
      res = all = 0;
    }
  }
  return c;
}

advice advise_snapshot(const torch_snapshot& s, const std::string& file, int device,
                       const std::vector<replay_policy>& policies,
                       const std::vector<std::size_t>& fit_limits, unsigned threads,
                       std::optional<std::size_t> device_memory) {
  const auto t0 = std::chrono::steady_clock::now();
  if (policies.empty() || !policies.front().conf.empty())
    throw logic_error("advise_snapshot: the first policy must be the defaults");
  advice a;
  a.file = file;
  a.device = device;
  a.fit_limits = fit_limits;
  a.device_memory = device_memory;
  const snapshot_trace st(s, file, device);
  const prepared_trace& trace = st.prepared;
  a.recorded = st.recorded;
  a.live_peak = trace.peak_requested;
  a.recorded_conf = s.alloc_conf;
  a.trace_events = a.recorded.events;
  a.replay_events = st.events.size();

  thread_pool pool(threads ? threads : default_thread_count());
  a.threads = pool.size();
  a.policies.resize(policies.size());
  std::vector<allocator_options> opts;
  for (const auto& p : policies) opts.push_back(p.options);
  // Each distinct policy once without a limit (the sweep), then under each fit limit on the same
  // thread; a policy whose replays are another's (same_replays) takes that one's outcomes.
  const std::vector<std::size_t> same = same_replays(trace, opts);
  std::vector<std::size_t> distinct;
  std::vector<replay_policy> swept;
  for (std::size_t i = 0; i < policies.size(); ++i)
    if (same[i] == i) {
      distinct.push_back(i);
      swept.push_back(policies[i]);
    }
  policy_sweep sw = sweep_policies(trace, swept, pool, [&](std::size_t j, const policy_run& run) {
    const std::size_t i = distinct[j];
    policy_outcome& p = a.policies[i];
    for (std::size_t limit : fit_limits) {
      // Under a limit at or above its peak a policy never meets the limit: the replay would be
      // the one just made (garbage collection excepted, which the limit sets off).
      if (run.result && opts[i].garbage_collection_threshold <= 0 &&
          run.result->peak_reserved <= limit)
        p.fits.push_back(fit_outcome{limit, run.result->peak_reserved, std::nullopt});
      else
        p.fits.push_back(replay_under_limit(trace, opts[i], limit));
    }
  });
  for (std::size_t j = 0; j < distinct.size(); ++j) {
    a.policies[distinct[j]].result = std::move(sw.runs[j].result);
    a.policies[distinct[j]].failure = std::move(sw.runs[j].failure);
  }
  for (std::size_t i = 0; i < policies.size(); ++i) {
    policy_outcome& p = a.policies[i];
    if (same[i] != i) p = a.policies[same[i]];
    p.conf = policies[i].conf;
    p.knobs = knobs_of(opts[i]);
  }

  // Without a limit the recommendation is the policy of the lowest peak reserved under the worst
  // placement of segments (in whole pages), then the simplest: where the driver places segments
  // moves a peak, so the candidates (the defaults and the kAdviceCandidates lowest distinct
  // peaks with the replay's ascending addresses) are replayed under every placement.
  const std::vector<address_placement> placements = advise_placements();
  // Expandable segments grow inside address ranges reserved once, which every placement lays
  // out alike: such a policy is replayed under the first placement only, and the rest copy it.
  const auto placed = [&](std::size_t i, std::size_t q) {
    return opts[i].expandable_segments && q > 0 ? std::size_t{0} : q;
  };
  std::vector<std::vector<std::size_t>> peaks(a.policies.size());
  // Per ranked policy and placement: the replay ran out of memory (a policy with a fraction of
  // its own that fits with ascending addresses need not fit under another placement).
  std::vector<std::vector<char>> ran_out(a.policies.size());
  const bool any_fits = std::any_of(a.policies.begin(), a.policies.end(), [](const auto& p) {
    return std::any_of(p.fits.begin(), p.fits.end(), [](const auto& f) { return f.fits(); });
  });
  if (!any_fits) {  // with limits that none fits: the lowest peak too
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < a.policies.size(); ++i)
      if (a.policies[i].result) order.push_back(i);
    const auto key = [&](std::size_t i) {
      const auto& p = a.policies[i];
      return std::tuple(round_up(p.result->peak_reserved, kAdvicePage), p.knobs,
                        p.result->peak_reserved, i);
    };
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
    // The defaults (they run without a limit), then the first of each group of policies whose
    // replays are the same (the one with the fewest keys, by the order), up to the candidates.
    std::vector<std::size_t> ranked;
    if (a.policies[0].result) ranked.push_back(0);
    std::vector<char> group_seen(a.policies.size(), 0);
    group_seen[same[0]] = 1;
    for (std::size_t i : order)
      if (ranked.size() <= kAdviceCandidates && !group_seen[same[i]]) {
        group_seen[same[i]] = 1;
        ranked.push_back(i);
      }
    for (std::size_t i : ranked) {
      peaks[i].resize(placements.size());
      ran_out[i].resize(placements.size());
      // The sweep's replay is the first placement's (ascending addresses, no limit).
      peaks[i][0] = a.policies[i].result->peak_reserved;
    }
    // A policy that runs out of memory under some placement ranks last.
    const auto robust = [&](std::size_t i) {
      const bool fails =
          std::any_of(ran_out[i].begin(), ran_out[i].end(), [](char c) { return c; });
      return std::tuple(
          fails ? SIZE_MAX
                : round_up(*std::max_element(peaks[i].begin(), peaks[i].end()), kAdvicePage),
          a.policies[i].knobs, key(i));
    };
    // Each candidate's other placements, the defaults first, then by ascending peak: a candidate
    // whose ascending peak (a lower bound of its worst) rounds above the best worst so far
    // cannot win, and is not replayed further.
    std::optional<std::size_t> best;
    for (std::size_t i : ranked) {
      if (best && round_up(peaks[i][0], kAdvicePage) > std::get<0>(robust(*best))) continue;
      pool.parallel_for(placements.size() - 1, [&](std::size_t j) {
        throw_if_interrupted();
        const std::size_t q = j + 1;
        if (placed(i, q) != q) return;
        const fit_outcome f = replay_under_limit(trace, opts[i], SIZE_MAX, placements[q]);
        peaks[i][q] = f.peak_reserved;
        ran_out[i][q] = f.oom.has_value();
      });
      for (std::size_t q = 1; q < placements.size(); ++q) {
        peaks[i][q] = peaks[i][placed(i, q)];
        ran_out[i][q] = ran_out[i][placed(i, q)];
      }
      if (!best || robust(i) < robust(*best)) best = i;
    }
    if (best) a.recommended = *best;
  }
  // Per limit, the simplest policy that fits it under every placement of segments (the
  // candidates in order, each checked under the other placements until one holds); where none
  // does, the simplest that fits with ascending addresses.
  for (std::size_t k = 0; k < fit_limits.size(); ++k) {
    std::vector<std::size_t> fitting;
    for (std::size_t i = 0; i < a.policies.size(); ++i)
      if (a.policies[i].fits[k].fits()) fitting.push_back(i);
    const auto key = [&](std::size_t i) {
      return std::tuple(a.policies[i].knobs, a.policies[i].fits[k].peak_reserved, i);
    };
    std::sort(fitting.begin(), fitting.end(),
              [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
    std::optional<std::size_t> choice;
    for (const std::size_t i : fitting) {
      throw_if_interrupted();
      bool everywhere = true;
      for (std::size_t q = 1; q < placements.size() && everywhere; ++q)
        everywhere = placed(i, q) != q ||
                     replay_under_limit(trace, opts[i], fit_limits[k], placements[q]).fits();
      if (everywhere) {
        choice = i;
        break;
      }
    }
    a.fit_choice_everywhere.push_back(choice || fitting.empty());
    if (!choice && !fitting.empty()) choice = fitting.front();
    a.fit_choice.push_back(choice);
  }
  // With limits: the simplest policy that fits the smallest limit anything fits. Its line sets
  // that limit as a memory fraction where what it claims needs one: garbage collection acts only
  // under one, and a peak without a limit above it fits only as the limit makes it.
  if (const auto k = a.tightest_fit()) {
    a.recommended = *a.fit_choice[*k];
    const policy_outcome& p = a.policies[a.recommended];
    const allocator_options& o = opts[a.recommended];
    if (o.per_process_memory_fraction <= 0 && (o.garbage_collection_threshold > 0 || !p.result ||
                                               p.result->peak_reserved > a.fit_limits[*k]))
      a.line_limit = a.fit_limits[*k] / kAdvicePage * kAdvicePage;
  }

  // A limit thought to fit, where bisection starts: the peak without a limit (a policy that ran
  // out of memory under its own fraction: twice the live peak; bisection widens as it must).
  const auto fitting_of = [&](std::size_t i) {
    const auto& p = a.policies[i];
    return p.result ? p.result->peak_reserved : 2 * a.live_peak;
  };
  // The smallest limit of each detailed policy (the defaults, then the recommendation unless it
  // is the defaults) under each placement, all on the pool.
  const std::size_t detailed = a.recommended == 0 ? 1 : 2;
  std::vector<std::vector<std::size_t>> smallest(detailed,
                                                 std::vector<std::size_t>(placements.size(), 0));
  pool.parallel_for(detailed * placements.size(), [&](std::size_t j) {
    throw_if_interrupted();
    const std::size_t which = j / placements.size(), k = j % placements.size();
    const std::size_t i = which == 0 ? 0 : a.recommended;
    if (placed(i, k) != k) return;  // copied below
    // The ranking's peak under this placement fits as it is: bisection starts below it.
    smallest[which][k] = peaks[i].empty() || ran_out[i][k]
                             ? smallest_fitting_limit(trace, opts[i], fitting_of(i), placements[k])
                             : smallest_fitting_limit(trace, opts[i], peaks[i][k], placements[k],
                                                      /*fits_unlimited=*/true);
  });
  for (std::size_t which = 0; which < detailed; ++which)
    for (std::size_t k = 0; k < placements.size(); ++k)
      smallest[which][k] = smallest[which][placed(which == 0 ? 0 : a.recommended, k)];
  const auto detail = [&](std::size_t i, std::size_t which) {
    policy_detail d;
    d.index = i;
    allocator_options o = opts[i];
    d.smallest_by_placement = smallest[which];
    // The largest placement's limit, raised while a placement does not fit it (a replay need not
    // fit every limit above its smallest); `below` is replayed under the placement that needed
    // the limit.
    const auto worst =
        std::max_element(d.smallest_by_placement.begin(), d.smallest_by_placement.end());
    std::size_t need = static_cast<std::size_t>(worst - d.smallest_by_placement.begin());
    d.smallest_limit = *worst;
    while (d.smallest_limit < (std::size_t{1} << 45)) {  // 32 TiB: as far as bisection widens
      std::optional<std::size_t> misfit;
      for (std::size_t k = 0; k < placements.size() && !misfit; ++k)
        if (d.smallest_by_placement[k] < d.smallest_limit &&
            !replay_under_limit(trace, o, d.smallest_limit, placements[k]).fits())
          misfit = k;
      if (!misfit) break;
      need = *misfit;
      d.smallest_limit += kAdvicePage;
    }
    if (d.smallest_limit >= kAdvicePage)
      d.below = replay_under_limit(trace, o, d.smallest_limit - kAdvicePage, placements[need]);
    for (std::size_t k = 0; k < fit_limits.size(); ++k) {  // the ascending one is replayed
      std::size_t n = a.policies[i].fits[k].fits() ? 1 : 0;
      for (std::size_t q = 1; q < placements.size(); ++q)
        n += placed(i, q) != q ? (a.policies[i].fits[k].fits() ? 1 : 0)
             : replay_under_limit(trace, o, fit_limits[k], placements[q]).fits() ? 1
                                                                                 : 0;
      d.fits_in.push_back(n);
    }
    if (which == 1 && a.line_limit) o.reserved_limit = *a.line_limit;  // as its line runs it
    if (!peaks[i].empty() && o.reserved_limit == opts[i].reserved_limit)
      d.peak_by_placement = peaks[i];  // replayed for the ranking
    else
      for (std::size_t q = 0; q < placements.size(); ++q)
        d.peak_by_placement.push_back(
            placed(i, q) != q
                ? d.peak_by_placement.front()
                : replay_under_limit(trace, o, SIZE_MAX, placements[q]).peak_reserved);
    replay_moments m = moments_of(trace, o);
    d.stranded = std::move(m.at_peak_reserved);
    d.stranded_at_allocated = std::move(m.at_peak_allocated);
    d.growth = std::move(m.growth);
    d.growth_total = m.growth_total;
    d.curve = usage_over_trace(trace, o);
    return d;
  };
  std::vector<policy_detail> details(2);
  pool.parallel_for(detailed,
                    [&](std::size_t k) { details[k] = detail(k == 0 ? 0 : a.recommended, k); });
  a.defaults = std::move(details[0]);
  a.recommendation = a.recommended == 0 ? a.defaults : std::move(details[1]);
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

}  // namespace gpu_basics

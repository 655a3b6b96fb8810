// Pre-flight's predictions: recordings read with their frames, the synthesized trace replayed at
// each batch asked for, the largest batch that fits a limit (doubling, then bisection), under the
// defaults and under the policy advise recommends for the largest recording. The model itself is
// preflight_align.cpp; the tables and JSON preflight_present.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/preflight.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

namespace gpu_basics {

namespace {
/// Where doubling gives up: no job has a batch this large.
constexpr std::size_t kMaxBatch = std::size_t{1} << 48;
/// Frames kept per allocation: enough to tell its site, few enough to hold a long trace's.
constexpr std::size_t kFramesKept = 8;
}  // namespace

batch_recording read_batch_recording(const std::string& path, std::size_t batch) {
  batch_recording r;
  r.batch = batch;
  r.name = path;
  const torch_snapshot s = read_torch_snapshot(path);
  const int device = s.busiest_device();
  std::size_t rebuilt = 0;
  r.events = to_replay_trace(s, device, &rebuilt);
  std::set<std::size_t> ordinals;  // every alloc entry of the trace
  std::size_t allocs = 0;
  for (std::size_t i = rebuilt; i < r.events.size(); ++i)
    if (r.events[i].kind == replay_event::op::alloc) ordinals.insert(allocs++);
  const alloc_frames found = read_alloc_frames(path, device, ordinals, kFramesKept);
  if (found.frames.empty()) return r;
  r.frames.resize(r.events.size());
  std::size_t ordinal = 0;
  for (std::size_t i = rebuilt; i < r.events.size(); ++i) {
    if (r.events[i].kind != replay_event::op::alloc) continue;
    if (const auto it = found.frames.find(ordinal++); it != found.frames.end())
      for (const std::string& f : it->second) r.frames[i] += (r.frames[i].empty() ? "" : "; ") + f;
  }
  return r;
}

replay_result predict_at(const batch_model& m, std::size_t batch, const allocator_options& o) {
  return replay_trace(m.trace_at(batch), o);
}

namespace {
/// Whether the trace at `batch` replays within `limit` bytes reserved under `o`.
bool fits_at(const batch_model& m, std::size_t batch, const allocator_options& o,
             std::size_t limit) {
  throw_if_interrupted();
  std::vector<replay_event> trace;
  try {
    trace = m.trace_at(batch);
  } catch (const preflight_error&) {  // a block beyond what a replay holds: beyond any limit
    return false;
  }
  prepared_trace p;
  try {
    p = prepare_trace(trace);
  } catch (const format_error&) {  // live bytes beyond kMaxReplayBytes
    return false;
  }
  if (p.peak_requested > limit) return false;  // no policy fits below the live bytes
  return replay_under_limit(p, o, limit).fits();
}
}  // namespace

std::optional<std::size_t> largest_fitting_batch(const batch_model& m, const allocator_options& o,
                                                 std::size_t limit, bool* monotone) {
  // The trace at a batch is the closest recording's model: bisection holds within each one's range
  // of batches ([from, to], the last one's without end), not across them.
  const auto& recs = m.recordings();
  const std::size_t n = recs.size();
  std::size_t found = 0;        // the largest batch found to fit (0: none)
  bool gap = false;             // a range that stops fitting before its end
  bool fits_after_gap = false;  // and a larger batch that fits again
  std::size_t from = 1;
  for (std::size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    // Batch B is i's while 2B < its batch + the next one's (the larger of two as close).
    const std::size_t to = last ? kMaxBatch : (recs[i].batch + recs[i + 1].batch - 1) / 2;
    if (to < from) continue;
    std::size_t lo = 0, hi = 0;  // lo fits (0: none yet), hi does not (0: not found)
    if (!fits_at(m, from, o, limit)) {
      gap = true;
      from = to + 1;
      continue;
    }
    lo = from;
    if (!last) {
      if (fits_at(m, to, o, limit))
        lo = to;
      else
        hi = to;
    } else {
      const std::size_t start = std::max(from, recs[i].batch);
      if (fits_at(m, start, o, limit)) {
        if (!m.grows(i)) {  // every batch above needs what this one does
          if (monotone) *monotone = !gap;
          return std::nullopt;
        }
        lo = start;
        for (hi = 2 * lo; fits_at(m, hi, o, limit); hi *= 2) {
          lo = hi;
          if (hi >= kMaxBatch) break;
        }
        if (lo >= kMaxBatch) hi = 0;
      } else {
        hi = start;
      }
    }
    if (hi != 0)
      while (hi - lo > 1) {
        const std::size_t mid = lo + (hi - lo) / 2;
        (fits_at(m, mid, o, limit) ? lo : hi) = mid;
      }
    if (gap) fits_after_gap = true;
    if (hi != 0 && !last) gap = true;  // it stops fitting inside this range
    found = lo;
    from = to + 1;
  }
  if (monotone) *monotone = !fits_after_gap;
  return found;
}

std::vector<std::size_t> preflight_curve_batches(const preflight_report& r) {
  std::set<std::size_t> s(r.batches.begin(), r.batches.end());
  for (const auto& p : r.predictions) s.insert(p.batch);
  if (r.fit && !r.batches.empty()) {
    std::size_t top = 0;  // the larger largest batch (0: none found, or every batch fits)
    for (const auto& b : {r.fit->defaults, r.fit->recommended})
      if (b && *b > 0) {
        s.insert(*b);
        top = std::max(top, *b);
      }
    const auto lo = static_cast<double>(r.batches.front());
    const double hi = std::ceil(1.25 * static_cast<double>(top));
    if (top > 0 && hi > lo)
      for (std::size_t k = 0; k < kCurvePoints; ++k) {
        const double f = static_cast<double>(k) / static_cast<double>(kCurvePoints - 1);
        s.insert(std::max<std::size_t>(
            1, static_cast<std::size_t>(std::llround(lo * std::pow(hi / lo, f)))));
      }
  }
  return {s.begin(), s.end()};
}

namespace {
/// The chart's points: the predictions already made copied, the other batches replayed under
/// both policies (`same`: the recommendation is the defaults, replayed once); a batch beyond what
/// a replay holds is left out.
std::vector<preflight_prediction> curve_of(
    const batch_model& m, const preflight_report& r,
    const std::vector<std::pair<std::string, replay_policy>>& which, bool same, thread_pool& pool) {
  const std::vector<std::size_t> batches = preflight_curve_batches(r);
  std::map<std::size_t, std::size_t> made;  // batch -> its defaults' index in r.predictions
  for (std::size_t j = 0; j + 1 < r.predictions.size(); j += 2)
    made.emplace(r.predictions[j].batch, j);
  std::vector<std::optional<preflight_prediction>> points(2 * batches.size());
  pool.parallel_for(points.size(), [&](std::size_t j) {
    const std::size_t w = j % 2;
    const std::size_t batch = batches[j / 2];
    if (const auto it = made.find(batch); it != made.end()) {
      points[j] = r.predictions[it->second + w];
      return;
    }
    if (same && w == 1) return;
    try {
      const replay_result x = predict_at(m, batch, which[w].second.options);
      points[j] = preflight_prediction{batch, which[w].first, which[w].second.conf,
                                       x.peak_allocated, x.peak_reserved};
    } catch (const format_error&) {  // beyond what a replay holds: no point there
    }
  });
  std::vector<preflight_prediction> out;
  for (std::size_t j = 0; j < points.size(); j += 2) {
    if (!points[j]) continue;
    if (!points[j + 1]) {
      if (!same) continue;  // the recommendation's replay failed: neither is drawn
      points[j + 1] = *points[j];
      points[j + 1]->which = which[1].first;
    }
    out.push_back(*points[j]);
    out.push_back(*points[j + 1]);
  }
  return out;
}
}  // namespace

preflight_report run_preflight(const batch_model& m, const std::vector<std::size_t>& at,
                               std::optional<std::size_t> fit_limit, unsigned threads,
                               bool with_curve) {
  const auto t0 = std::chrono::steady_clock::now();
  preflight_report r;
  for (const auto& rec : m.recordings()) {
    r.files.push_back(rec.name);
    r.batches.push_back(rec.batch);
    r.events.push_back(rec.events.size());
    r.unmatched.push_back(m.unmatched(r.files.size() - 1));
    r.scratch.push_back(m.scratch(r.files.size() - 1).count);
  }
  r.scratch_first = m.scratch(r.files.size() - 1).first;
  // The recommendation: advise's for the largest recording, as advise searches it.
  const std::vector<replay_policy> policies = advise_policies({});
  const batch_recording& largest = m.recordings().back();
  const advice a = advise_snapshot(torch_snapshot_of(largest.events), printable(largest.name), 0,
                                   policies, {}, threads);
  r.recommended = lines_of(a).conf;
  const std::vector<std::pair<std::string, replay_policy>> which = {
      {"defaults", policies.front()}, {"recommended", policies.at(a.recommended)}};

  thread_pool pool(threads ? threads : default_thread_count());
  // The recommendation may be the defaults: each replay is made once and copied.
  const bool same = which[0].second.options == which[1].second.options;
  r.predictions.resize(2 * at.size());
  pool.parallel_for(r.predictions.size(), [&](std::size_t j) {
    const std::size_t w = j % 2;
    if (same && w == 1) return;
    const replay_result x = predict_at(m, at[j / 2], which[w].second.options);
    r.predictions[j] = {at[j / 2], which[w].first, which[w].second.conf, x.peak_allocated,
                        x.peak_reserved};
  });
  if (same)
    for (std::size_t j = 1; j < r.predictions.size(); j += 2) {
      r.predictions[j] = r.predictions[j - 1];
      r.predictions[j].which = which[1].first;
    }
  if (fit_limit) {
    std::vector<std::optional<std::size_t>> largest_batch(2);
    bool monotone[2] = {true, true};
    pool.parallel_for(same ? 1 : 2, [&](std::size_t w) {
      largest_batch[w] =
          largest_fitting_batch(m, which[w].second.options, *fit_limit, &monotone[w]);
    });
    if (same) {
      largest_batch[1] = largest_batch[0];
      monotone[1] = monotone[0];
    }
    r.fit = preflight_fit{*fit_limit, largest_batch[0], largest_batch[1], r.recommended,
                          monotone[0] && monotone[1]};
  }
  if (with_curve) r.curve = curve_of(m, r, which, same, pool);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gpu_basics

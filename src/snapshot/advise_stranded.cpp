// The moments of a replay that explain its peak: the reserved-but-free bytes at the first peak of
// reserved and at the first peak of allocated, split by why the request then could not use them,
// and the events that grew reserved beyond what the live blocks needed.
#include <algorithm>
#include <map>

#include "gpu_basics/snapshot/advise.hpp"

namespace gpu_basics {

namespace {

/// Why the free block `b` of segment `g` could not serve the request of `s` (a new segment's rest
/// when `holds_new`).
stranded_cause cause_of(const block_view& b, const segment_view& g, const stranded_split& s,
                        bool holds_new, const allocator_options& o) {
  if (b.state != block_state::inactive) return stranded_cause::unexplained;  // none in a replay
  if (g.stream != s.stream) return stranded_cause::other_stream;
  if (g.small != s.small_pool) return stranded_cause::other_pool;
  if (g.expandable) return stranded_cause::expandable_pages;
  if (holds_new) return stranded_cause::segment_rest;
  if (oversize_block_refused(b.size, s.rounded_bytes, o)) return stranded_cause::max_split;
  if (b.size < s.rounded_bytes) return stranded_cause::too_small;
  return stranded_cause::unexplained;
}

/// The split of the cache of `r` right after event `at`, whose block (if an alloc) is `p`.
stranded_split split_now(trace_replayer& r, std::size_t at, void* p) {
  stranded_split s;
  const replay_event& e = r.event(at);
  s.event = at;
  s.request_bytes = e.bytes;
  s.rounded_bytes = round_request(e.bytes, r.options());
  s.stream = e.stream;
  s.small_pool = is_small_request(s.rounded_bytes);
  const auto new_ptr = reinterpret_cast<std::uintptr_t>(p);
  std::map<std::pair<stranded_cause, stream_handle>, std::size_t> parts;
  for (const segment_view& g : r.allocator().segments()) {
    s.reserved += g.total_size;
    s.allocated += g.allocated_size;
    s.requested += g.requested_size;
    const bool holds_new = !g.expandable && new_ptr >= g.ptr && new_ptr - g.ptr < g.total_size;
    for (const block_view& b : g.blocks) {
      if (b.state == block_state::active_allocated) continue;
      const stranded_cause c = cause_of(b, g, s, holds_new, r.options());
      parts[{c, c == stranded_cause::other_stream ? g.stream : 0}] += b.size;
    }
  }
  for (const auto& [k, bytes] : parts)
    if (bytes > 0) s.parts.push_back({k.first, bytes, k.second});
  return s;
}

/// The split right after event `at` of a fresh replay of `trace` under `o`.
stranded_split split_at(const prepared_trace& trace, const allocator_options& o, std::size_t at) {
  trace_replayer r(trace, o);
  void* p = nullptr;
  for (std::size_t i = 0; i <= at; ++i) p = r.step(i);
  return split_now(r, at, p);
}

}  // namespace

stranded_split stranded_at_peak(const prepared_trace& trace, const allocator_options& o) {
  std::size_t peak = 0, at = 0;
  bool any = false;
  {
    trace_replayer r(trace, o);
    for (std::size_t i = 0; i < r.events(); ++i) {
      if (!r.step(i)) continue;
      if (const std::size_t now = r.reserved(); now > peak || !any) {
        peak = now;
        at = i;
        any = true;
      }
    }
  }
  return any ? split_at(trace, o, at) : stranded_split{};
}

std::size_t stranded_split::bytes_of(stranded_cause c) const noexcept {
  std::size_t n = 0;
  for (const auto& p : parts)
    if (p.cause == c) n += p.bytes;
  return n;
}

replay_moments moments_of(const prepared_trace& trace, const allocator_options& o,
                          std::size_t growth_events) {
  // First pass: the first peaks of reserved and of allocated, and each event's growth of
  // reserved beyond what live blocks needed up to the reserved peak (kept: the largest).
  replay_moments m;
  std::size_t peak_reserved = 0, peak_allocated = 0;
  bool any = false;
  std::vector<growth_event> grew;  // every event that grew reserved beyond need
  {
    trace_replayer r(trace, o, {}, /*count_allocated=*/true);
    for (std::size_t i = 0; i < r.events(); ++i) {
      const std::size_t before = r.reserved();
      if (!r.step(i)) continue;
      const std::size_t now = r.reserved(), allocated = r.allocated();
      if (now > before) {
        const std::size_t need = std::max(before, allocated);
        if (now > need)
          grew.push_back({i, r.event(i).bytes, now - before, now - need, before,
                          stranded_cause::unexplained, r.event(i).stream});
      }
      if (now > peak_reserved || !any) {
        peak_reserved = now;
        m.peak_reserved_event = i;
      }
      if (allocated > peak_allocated || !any) {
        peak_allocated = allocated;
        m.peak_allocated_event = i;
      }
      any = true;
    }
  }
  if (!any) return m;
  for (const growth_event& g : grew)
    if (g.event <= m.peak_reserved_event) m.growth_total += g.excess_bytes;
  m.at_peak_reserved = split_at(trace, o, m.peak_reserved_event);
  m.at_peak_allocated = m.peak_allocated_event == m.peak_reserved_event
                            ? m.at_peak_reserved  // one moment: one replay to it
                            : split_at(trace, o, m.peak_allocated_event);
  // The largest growths up to the peak, in event order; each one's cause: the largest part of the
  // free bytes then (beside the new segment's own rest).
  std::erase_if(grew, [&](const growth_event& g) { return g.event > m.peak_reserved_event; });
  std::stable_sort(grew.begin(), grew.end(), [](const growth_event& a, const growth_event& b) {
    return a.excess_bytes > b.excess_bytes;
  });
  if (grew.size() > growth_events) grew.resize(growth_events);
  std::sort(grew.begin(), grew.end(),
            [](const growth_event& a, const growth_event& b) { return a.event < b.event; });
  if (!grew.empty()) {
    trace_replayer r(trace, o);
    std::size_t next = 0;
    for (std::size_t i = 0; i < r.events() && next < grew.size(); ++i) {
      void* p = r.step(i);
      if (i != grew[next].event) continue;
      const stranded_split s = split_now(r, i, p);
      std::size_t most = 0;
      for (const auto& part : s.parts)
        if (part.cause != stranded_cause::segment_rest && part.bytes > most) {
          most = part.bytes;
          grew[next].cause = part.cause;
        }
      ++next;
    }
  }
  m.growth = std::move(grew);
  return m;
}

}  // namespace gpu_basics

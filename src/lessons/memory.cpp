// The memory lesson's host side: its notes and tables from a result, and the registry entry
// (reading schema-1 files: v1/memory_v1.cpp). No CUDA header: tested on the CPU.
#include "gpu_basics/lessons/memory.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "table_labels.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

double mib(double bytes) {
  return bytes * kPerMiB;
}

/// A duration as a person reads it: ns below 1 us, us below 1 ms, else ms.
std::string duration_text(double s) {
  if (s < 1e-6) return fmt::format("{:.0f} ns", s * 1e9);
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  return fmt::format("{:.2f} ms", s * 1e3);
}

/// "2.5x faster than" / "2.5x slower than": `a` against `b` (both > 0).
std::string compared_to(double a, double b) {
  if (a < b) return fmt::format("{:.1f}x faster than", b / a);
  return fmt::format("{:.1f}x slower than", a / b);
}

// ---- allocation_cost ----------------------------------------------------------------------

double raw_pair_s(const allocation_cost_row& r) {
  return r.cuda_malloc_s + r.cuda_free_s;
}

table allocation_cost_table(const allocation_cost_result& a) {
  table t;
  t.id = "allocation_cost";
  t.title = "What one allocation + free costs (host clock, median)";
  t.columns = {{"bytes", "size"},
               {"cuda_malloc_s", "cudaMalloc (us)", 1e6, 1},
               {"cuda_free_s", "cudaFree (us)", 1e6, 1},
               {"malloc_async_pair_s", "cudaMallocAsync+Free (us)", 1e6, 2},
               {"cached_pair_s", "caching allocator hit (us)", 1e6, 3},
               {"speedup_vs_cuda_malloc", "x vs cudaMalloc+Free", 1.0, 0},
               {"speedup_vs_malloc_async", "x vs MallocAsync", 1.0, 1}};
  for (const auto& r : a.rows) {
    const bool hit = r.cached_pair_s > 0;
    t.add_row({format_bytes(r.bytes), r.cuda_malloc_s, r.cuda_free_s, r.malloc_async_pair_s,
               r.cached_pair_s, hit ? value(raw_pair_s(r) / r.cached_pair_s) : value(),
               hit ? value(r.malloc_async_pair_s / r.cached_pair_s) : value()});
  }
  return t;
}

std::vector<note> allocation_cost_notes(const allocation_cost_result& a) {
  const std::string id = "allocation_cost";
  if (a.rows.empty()) return {};
  const auto by_bytes = [](const auto& x, const auto& y) { return x.bytes < y.bytes; };
  const auto by_hit = [](const auto& x, const auto& y) {
    return x.cached_pair_s < y.cached_pair_s;
  };
  const auto [small, large] = std::minmax_element(a.rows.begin(), a.rows.end(), by_bytes);
  const auto [fast, slow] = std::minmax_element(a.rows.begin(), a.rows.end(), by_hit);
  std::string cost =
      fmt::format("{} for {}", duration_text(raw_pair_s(*small)), format_bytes(small->bytes));
  if (small->bytes != large->bytes)
    cost += fmt::format(" and {} for {}", duration_text(raw_pair_s(*large)),
                        format_bytes(large->bytes));
  std::vector<note> n;
  n.push_back({id, fmt::format("- cudaMalloc and cudaFree go to the driver: it finds physical "
                               "pages, maps them into the GPU's address space and, for cudaFree, "
                               "synchronizes the device. cudaMalloc + cudaFree took {} here, and "
                               "cudaFree stalls every stream.",
                               cost)});
  std::string hits = duration_text(fast->cached_pair_s);
  if (duration_text(slow->cached_pair_s) != hits)
    hits += " to " + duration_text(slow->cached_pair_s);
  std::string text = fmt::format(
      "- A caching allocator (PyTorch's, or gpu_basics::caching_allocator) keeps freed blocks and "
      "hands them out again: a cache hit is host bookkeeping only, {} here. cudaMallocAsync is the "
      "driver's own stream-ordered pool",
      hits);
  const auto& l = *large;
  if (l.malloc_async_pair_s > 0 && raw_pair_s(l) > 0 && l.cached_pair_s > 0)
    text += fmt::format(
        ": a pair of {} took {}, {} cudaMalloc + cudaFree and {} a host-side cache hit.",
        format_bytes(l.bytes), duration_text(l.malloc_async_pair_s),
        compared_to(l.malloc_async_pair_s, raw_pair_s(l)),
        compared_to(l.malloc_async_pair_s, l.cached_pair_s));
  else
    text += ".";
  n.push_back({id, std::move(text)});
  return n;
}

// ---- caching ------------------------------------------------------------------------------

const caching_step* find_step(const caching_result& c, std::string_view kind) {
  for (const auto& s : c.steps)
    if (s.kind == kind) return &s;
  return nullptr;
}

table caching_table(const caching_result& c) {
  table t;
  t.id = "caching";
  t.title = fmt::format("Allocate, free, allocate again, empty_cache ({} x {})", c.blocks,
                        format_bytes(c.block_bytes));
  t.columns = {{"step", "step"},
               {"allocated_bytes", "allocated (MiB)", kPerMiB, 0},
               {"reserved_bytes", "reserved (MiB)", kPerMiB, 0},
               {"device_allocations", "cudaMalloc calls", 1.0, 0},
               {"step_s", "time (us)", 1e6, 1}};
  for (const auto& s : c.steps)
    t.add_row({s.label, s.allocated_bytes, s.reserved_bytes, s.device_allocations, s.step_s});
  return t;
}

std::vector<note> caching_notes(const caching_result& c) {
  const std::string id = "caching";
  std::vector<note> n;
  std::string first =
      "- 'allocated' counts blocks handed out; 'reserved' what the allocator holds from the "
      "driver.";
  if (const auto* f = find_step(c, "free"))
    first += fmt::format(
        " After the free, allocated drops to {:.0f} MiB but reserved stays at {:.0f} MiB: the "
        "memory is cached, which is why nvidia-smi shows a PyTorch process holding memory it no "
        "longer uses.",
        mib(static_cast<double>(f->allocated_bytes)), mib(static_cast<double>(f->reserved_bytes)));
  n.push_back({id, std::move(first)});
  if (c.empty_cache) {
    const auto& ec = *c.empty_cache;
    std::string price;
    const auto* after = find_step(c, "allocate_after_empty_cache");
    const auto* again = find_step(c, "allocate_again");
    if (after && again)
      price = fmt::format(" ({} for one {} block here, against {} for {} cache hits)",
                          duration_text(after->step_s), format_bytes(c.block_bytes),
                          duration_text(again->step_s), c.blocks);
    n.push_back(
        {id, fmt::format(
                 "- empty_cache() released {} segment(s) ({:.0f} MiB) and kept {} ({} in use, {} "
                 "waiting on other streams). It gives memory back to other processes, at the price "
                 "of paying cudaMalloc again on the next allocation{}.",
                 ec.released_segments, mib(static_cast<double>(ec.released_bytes)),
                 ec.kept_in_use_segments + ec.kept_pending_segments, ec.kept_in_use_segments,
                 ec.kept_pending_segments, price)});
  }
  return n;
}

// ---- peak ---------------------------------------------------------------------------------

using labels::kPeakAllocated;
using labels::kPeakReserved;
using labels::kPeakSum;
using labels::kPeakWeights;

table peak_table(const peak_result& p) {
  table t;
  t.id = "peak";
  t.title = "Peak memory of a workload (reset_peak_stats, then a forward/backward-like pass)";
  t.columns = {{"quantity", "quantity"}, {"bytes", "MiB", kPerMiB, 1}};
  const auto opt = [](const std::optional<std::int64_t>& v) { return v ? value(*v) : value(); };
  t.add_row({std::string(kPeakWeights), static_cast<std::int64_t>(p.weights_bytes)});
  t.add_row({std::string(kPeakAllocated), opt(p.peak_allocated_bytes)});
  t.add_row({std::string(kPeakReserved), opt(p.peak_reserved_bytes)});
  t.add_row({std::string(kPeakSum), static_cast<std::int64_t>(p.requested_bytes)});
  return t;
}

std::vector<note> peak_notes(const peak_result& p) {
  std::string above;
  if (p.peak_allocated_bytes)
    above = fmt::format(
        " ({:.0f} MiB above the weights)",
        mib(static_cast<double>(*p.peak_allocated_bytes) - static_cast<double>(p.weights_bytes)));
  return {{"peak", fmt::format("- The peak is what must fit on the GPU: here all activations of "
                               "the forward pass alive at once plus one gradient{}, not the sum "
                               "of every allocation ({:.0f} MiB). reset_peak_stats() scopes the "
                               "peak to the part of the program you care about.",
                               above, mib(static_cast<double>(p.requested_bytes)))}};
}

// ---- pinned_vs_pageable -------------------------------------------------------------------

constexpr const char* kPageableLabel = "pageable (malloc + first touch)";
constexpr const char* kPinnedLabel = "pinned (cudaHostAlloc)";

value opt_value(const std::optional<double>& v) {
  return v ? value(*v) : value();
}

table pinned_table(const pinned_result& p) {
  table t;
  t.id = "pinned_vs_pageable";
  t.title = fmt::format("Host memory for a {} tensor: pinned vs pageable", format_bytes(p.bytes));
  t.columns = {{"memory", "host memory"},
               {"allocate_s", "allocate (ms)", 1e3, 2},
               {"reuse_s", "reuse from pool (us)", 1e6, 2},
               {"h2d_bytes_per_s", "H2D GB/s", 1e-9, 1}};
  t.add_row({std::string(kPageableLabel), p.pageable_allocate_s, value(),
             opt_value(p.pageable_h2d_bytes_per_s)});
  if (p.use_pinned_memory)
    t.add_row({std::string(kPinnedLabel), opt_value(p.pinned_allocate_s),
               opt_value(p.pinned_reuse_s), opt_value(p.pinned_h2d_bytes_per_s)});
  return t;
}

std::string pinning_cost_note(const pinned_result& p) {
  // Pinning and first-touching fresh pageable memory both fault in every page; how the two
  // compare is this machine's (kernel, page size, IOMMU), so it is said from the figures.
  std::string s = "- cudaHostAlloc faults in every page, locks it and maps it for the GPU";
  if (p.pinned_allocate_s && p.pageable_allocate_s > 0) {
    const double ratio = *p.pinned_allocate_s / p.pageable_allocate_s;
    const char* how = ratio > 1.5 ? "more than" : ratio < 0.67 ? "less than" : "about as much as";
    s += fmt::format(
        ": it cost {} malloc and a first touch of the same memory, which faults the pages in too "
        "(cudaHostAlloc + cudaFreeHost of {} took {} here; malloc + first touch + free {}, "
        "{:.2f}x)",
        how, format_bytes(p.bytes), duration_text(*p.pinned_allocate_s),
        duration_text(p.pageable_allocate_s), ratio);
  }
  s += ". A pinned pool (gpu_basics::pinned_host_pool) pays that once and reuses the block";
  if (p.pinned_reuse_s)
    s += fmt::format(": a reuse took {} here", duration_text(*p.pinned_reuse_s));
  if (p.pool)
    s += fmt::format(" ({} block(s) pinned, {} cache hit(s) in all)", p.pool->backend_allocations,
                     p.pool->cache_hits);
  return s + ".";
}

std::string dma_note(const pinned_result& p, const device_facts& facts) {
  std::string s =
      "- The copy engine reads pinned memory directly (DMA). From pageable memory the driver first "
      "copies through its own pinned staging buffer with the CPU, so H2D runs ";
  const auto& pg = p.pageable_h2d_bytes_per_s;
  const auto& pn = p.pinned_h2d_bytes_per_s;
  if (pg && pn && *pg > 0 && *pn > 0) {
    const std::string how = *pn >= *pg ? fmt::format("{:.1f}x slower", *pn / *pg) : "no slower";
    s +=
        fmt::format("{} here ({:.1f} GB/s against {:.1f} GB/s pinned).", how, *pg / 1e9, *pn / 1e9);
  } else {
    s += "slower.";
  }
  if (pn && facts.link_bytes_per_s && *facts.link_bytes_per_s > 0)
    s += fmt::format(" Pinned H2D reached {:.0f}% of the PCIe link's {:.1f} GB/s per direction.",
                     100.0 * *pn / *facts.link_bytes_per_s, *facts.link_bytes_per_s / 1e9);
  return s;
}

std::vector<note> pinned_notes(const pinned_result& p, const device_facts& facts) {
  const std::string id = "pinned_vs_pageable";
  if (!p.use_pinned_memory)
    return {{id, "- memory.use_pinned_memory is false: only pageable memory is measured."}};
  return {{id, pinning_cost_note(p)}, {id, dma_note(p, facts)}};
}

// ---- fragmentation ------------------------------------------------------------------------

using labels::kFromCache;
using labels::kNewSegment;

table fragmentation_table(const fragmentation_result& f) {
  table t;
  t.id = "fragmentation";
  t.title = fmt::format("Fragmentation: a cached {} block, {} requests, then {} again",
                        format_bytes(f.large_bytes), format_bytes(f.small_bytes),
                        format_bytes(f.large_bytes));
  t.columns = {{"max_split_size", "max_split_size"},
               {"fragmentation", "fragmentation %", 100.0, 1},
               {"largest_free_bytes", "largest free (MiB)", kPerMiB, 0},
               {"reserved_bytes", "reserved after (MiB)", kPerMiB, 0},
               {"second_64mib", fmt::format("second {} from", format_bytes(f.large_bytes))}};
  for (const auto& r : f.rows)
    t.add_row({r.max_split_size ? format_bytes(*r.max_split_size) : std::string("unlimited"),
               r.fragmentation, static_cast<std::int64_t>(r.largest_free_bytes), r.reserved_bytes,
               std::string(r.new_segment ? kNewSegment : kFromCache)});
  return t;
}

std::vector<note> fragmentation_notes(const fragmentation_result& f) {
  const std::string id = "fragmentation";
  const auto unlimited =
      std::find_if(f.rows.begin(), f.rows.end(), [](const auto& r) { return !r.max_split_size; });
  const auto limited = std::find_if(f.rows.begin(), f.rows.end(),
                                    [](const auto& r) { return r.max_split_size.has_value(); });
  const std::string large = format_bytes(f.large_bytes);
  const std::string small = format_bytes(f.small_bytes);
  std::string first =
      "- fragmentation = 1 - largest free block / all free bytes: free memory in pieces too small "
      "for the next request.";
  if (unlimited != f.rows.end())
    first += fmt::format(
        " Without a limit the {} requests are carved out of the cached {} block; freeing every "
        "other one leaves holes ({:.1f}% fragmentation here), {}.",
        small, large, unlimited->fragmentation * 100.0,
        unlimited->new_segment
            ? fmt::format(
                  "the next {} request does not fit in any of them, and a new segment is reserved",
                  large)
            : fmt::format("yet the next {} request was served from the cache here", large));
  std::vector<note> n{{id, std::move(first)}};
  if (limited != f.rows.end())
    n.push_back(
        {id,
         fmt::format("- With max_split_size = {}, blocks that large are never split for small "
                     "requests: the {} requests get their own segments and the {} block stays "
                     "whole for the next large request{} (PyTorch: "
                     "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb).",
                     format_bytes(*limited->max_split_size), small, large,
                     limited->new_segment ? "; here, though, it still needed a new segment" : "")});
  return n;
}

// ---- expandable segments ------------------------------------------------------------------

std::string segments_name(const expandable_row& r) {
  if (!r.expandable) return "plain segments";
  return r.virtual_memory ? "expandable segments" : "expandable (unavailable: plain)";
}

double ratio(std::int64_t a, std::int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

table expandable_table(const expandable_result& e) {
  table t;
  t.id = "expandable_segments";
  t.title = fmt::format(
      "Expandable segments: {} steps of {} layers, activations {}..{} changing every step", e.steps,
      e.layers,
      format_bytes(*std::min_element(e.activation_bytes.begin(), e.activation_bytes.end())),
      format_bytes(*std::max_element(e.activation_bytes.begin(), e.activation_bytes.end())));
  t.columns = {{"segments", "segments"},
               {"peak_allocated_bytes", "peak allocated (MiB)", kPerMiB, 0},
               {"peak_reserved_bytes", "peak reserved (MiB)", kPerMiB, 0},
               {"reserved_over_allocated", "reserved / allocated", 1.0, 3},
               {"device_allocations", "cudaMalloc or page maps"},
               {"reserved_before_empty_cache", "reserved at the end (MiB)", kPerMiB, 0},
               {"released_by_empty_cache", "empty_cache released (MiB)", kPerMiB, 0},
               {"reserved_after_empty_cache", "reserved after (MiB)", kPerMiB, 0}};
  for (const auto& r : e.rows)
    t.add_row({segments_name(r), r.peak_allocated_bytes, r.peak_reserved_bytes,
               ratio(r.peak_reserved_bytes, r.peak_allocated_bytes), r.device_allocations,
               r.reserved_before_empty_cache, static_cast<std::int64_t>(r.released_by_empty_cache),
               r.reserved_after_empty_cache});
  return t;
}

std::vector<note> expandable_notes(const expandable_result& e) {
  const std::string id = "expandable_segments";
  const auto plain =
      std::find_if(e.rows.begin(), e.rows.end(), [](const auto& r) { return !r.expandable; });
  const auto grown =
      std::find_if(e.rows.begin(), e.rows.end(), [](const auto& r) { return r.expandable; });
  std::vector<note> n;
  n.push_back(
      {id, fmt::format(
               "- The workload: each step keeps {} activations whose size changes from step to "
               "step (a sequence length that varies by batch), makes a temporary twice that size "
               "per layer and a gradient per layer on the way back, and carries a {} block into "
               "the next step{}.",
               e.layers, format_bytes(e.carried_bytes),
               e.policy.empty() ? "" : fmt::format(" Rest of the policy: {}", e.policy))});
  if (plain != e.rows.end())
    n.push_back(
        {id,
         fmt::format("- Plain segments: every size the cache cannot serve becomes a new cudaMalloc "
                     "sized for it; a segment is reused only by requests that fit in it, and a "
                     "carried block keeps a whole segment split. Peak reserved is {:.2f}x peak "
                     "allocated ({} cudaMalloc calls).",
                     ratio(plain->peak_reserved_bytes, plain->peak_allocated_bytes),
                     plain->device_allocations)});
  if (grown != e.rows.end() && grown->virtual_memory)
    n.push_back(
        {id, fmt::format(
                 "- Expandable segments (PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True;"
                 " here memory.allocator.expandable_segments): one virtual address range per "
                 "stream, reserved once; physical pages (20 MiB for large blocks, 2 MiB for small "
                 "ones) are mapped at its end as it grows, so a larger request extends the range "
                 "instead of needing a new segment; pages wholly inside free blocks give their "
                 "memory back before the range would reserve more than it ever did. Peak reserved "
                 "is {:.2f}x peak allocated ({} page maps).",
                 ratio(grown->peak_reserved_bytes, grown->peak_allocated_bytes),
                 grown->device_allocations)});
  else if (grown != e.rows.end())
    n.push_back({id,
                 "- This device does not offer virtual memory management: expandable segments "
                 "fell back to plain segments."});
  if (plain != e.rows.end() && grown != e.rows.end() && grown->virtual_memory) {
    const auto kept_plain = static_cast<std::uint64_t>(plain->reserved_after_empty_cache);
    const auto kept_grown = static_cast<std::uint64_t>(grown->reserved_after_empty_cache);
    n.push_back(
        {id, fmt::format(
                 "- empty_cache with one {} block still live: plain segments keep the whole "
                 "segment it was cut from ({} here), expandable segments the 20 MiB pages under "
                 "it ({}){}. Both gave back everything else: {} and {}.",
                 format_bytes(e.carried_bytes), format_bytes(kept_plain), format_bytes(kept_grown),
                 kept_grown > kept_plain
                     ? "; a page is coarser than the small segment the block happened to sit in"
                     : "",
                 format_bytes(plain->released_by_empty_cache),
                 format_bytes(grown->released_by_empty_cache))});
  }
  return n;
}

}  // namespace

std::vector<note> explain_memory(const memory_result& r, const device_facts& facts) {
  std::vector<note> n;
  const auto add = [&n](std::vector<note> more) { n.insert(n.end(), more.begin(), more.end()); };
  if (r.allocation_cost) add(allocation_cost_notes(*r.allocation_cost));
  if (r.caching) add(caching_notes(*r.caching));
  if (r.peak) add(peak_notes(*r.peak));
  if (r.trace) add(explain_trace(*r.trace));
  if (r.pinned) add(pinned_notes(*r.pinned, facts));
  if (r.fragmentation) add(fragmentation_notes(*r.fragmentation));
  if (r.expandable) add(expandable_notes(*r.expandable));
  return n;
}

std::vector<table> present_memory(const memory_result& r) {
  std::vector<table> out;
  if (r.allocation_cost) out.push_back(allocation_cost_table(*r.allocation_cost));
  if (r.caching) out.push_back(caching_table(*r.caching));
  if (r.peak) out.push_back(peak_table(*r.peak));
  if (r.trace) out.push_back(present_trace(*r.trace));
  if (r.pinned) out.push_back(pinned_table(*r.pinned));
  if (r.fragmentation) out.push_back(fragmentation_table(*r.fragmentation));
  if (r.expandable) out.push_back(expandable_table(*r.expandable));
  return out;
}

lesson memory_lesson() {
  lesson l;
  l.name = "memory";
  l.description = "Lesson: device allocation, the caching allocator, pinned memory, empty_cache";
  l.traces = true;
  l.snapshots = true;
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    return render_typed<memory_result, explain_memory, present_memory>(j, f, "memory");
  };
  l.upgrade_v1 = [](const nlohmann::json& block) { return nlohmann::json(memory_from_v1(block)); };
  return l;
}

}  // namespace gpu_basics::lessons

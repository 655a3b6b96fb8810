// What the allocator reports: stats, history, segments (for memory snapshots), the OOM message,
// and the JSON of its records.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "caching_allocator_impl.hpp"
#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

namespace {
std::string mib(std::size_t b) {
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
}
}  // namespace

void caching_allocator::impl::fill_free_stats(allocator_stats& s) const {
  std::size_t total = 0, largest = 0;
  for (const free_set* p : {&small_free, &large_free})
    for (const block* b : *p) {  // free bytes with memory behind them
      const std::size_t n = resident_size(b);
      total += n;
      largest = std::max(largest, n);
    }
  const cache_claim claim(*this);
  for (const auto& c : caches) {
    for (std::size_t k = 0; k < c->n_cached; ++k) {
      total += c->cached[k]->size;
      largest = std::max(largest, c->cached[k]->size);
    }
  }
  s.cached_free_bytes = total;
  s.largest_free_block = largest;
  s.fragmentation = total ? 1.0 - static_cast<double>(largest) / static_cast<double>(total) : 0.0;
}

/// What to try, as PyTorch's message says it (in PYTORCH_CUDA_ALLOC_CONF's syntax).
std::string caching_allocator::impl::oom_hint(const allocator_stats& s) const {
  if (s.cached_free_bytes == 0 || vmm) return "";
  return ". If reserved but free memory is large, try expandable_segments:True to avoid "
         "fragmentation";
}

void caching_allocator::impl::throw_oom(std::size_t bytes, std::size_t rounded,
                                        stream_handle stream) {
  ++st.ooms;
  record(history_kind::oom, 0, bytes, stream);
  allocator_stats s = st;
  fill_free_stats(s);
  const auto [dev_free, dev_total] = backend.memory_info();
  std::string limit;
  if (o.reserved_limit != SIZE_MAX)
    limit = fmt::format(", reserved limit {}", mib(o.reserved_limit));
  throw out_of_memory(
      fmt::format("out of memory: tried to allocate {} ({} rounded) on stream {:#x}; allocator: "
                  "{} allocated, {} reserved, {} reserved but free, largest free block {}, "
                  "fragmentation {:.1f}%{}; {} memory: {} free of {}",
                  mib(bytes), mib(rounded), stream,
                  mib(static_cast<std::size_t>(s.allocated_bytes.current)),
                  mib(static_cast<std::size_t>(s.reserved_bytes.current)), mib(s.cached_free_bytes),
                  mib(s.largest_free_block), 100.0 * s.fragmentation, limit, backend.name(),
                  mib(dev_free), mib(dev_total)) +
          oom_hint(s),
      bytes);
}

allocator_stats caching_allocator::stats() const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const impl::cache_claim claim(m);         // one claim for the sweep and the free-block walk
  m.sweep_caches(impl::sweep_mode::empty);  // report the cache merged, as it is after thread caches
                                            // are emptied
  allocator_stats s = m.st;
  s.cache_claims = m.claims;
  s.cache_claim_ns = m.claim_ns;
  m.fill_free_stats(s);
  return s;
}

void caching_allocator::reset_peak_stats() {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.sweep_caches(impl::sweep_mode::fold);
  for (pool_stats* p : {static_cast<pool_stats*>(&m.st), &m.st.small_pool, &m.st.large_pool})
    for (memory_stat* s : {&p->allocated_bytes, &p->requested_bytes, &p->reserved_bytes,
                           &p->active_bytes, &p->inactive_split_bytes, &p->allocation_count,
                           &p->segment_count, &p->active_count, &p->inactive_split_count})
      s->peak = s->current;
}

std::vector<history_event> caching_allocator::history() const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  return {m.hist.begin(), m.hist.end()};
}

std::vector<segment_view> caching_allocator::segments() const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.sweep_caches(impl::sweep_mode::adopt);  // the blocks are read below
  std::vector<segment_view> out;
  // One view per plain segment, and per run of memory-backed blocks of an expandable range (as
  // PyTorch's snapshot reports expandable segments): a free block's pages without memory are
  // left out, cutting the run.
  const auto view = [&](const block* h, bool expandable) {
    segment_view sv;
    const auto flush = [&] {
      if (!sv.blocks.empty()) out.push_back(std::move(sv));
      sv = {};
    };
    const auto add = [&](const block* b, std::uintptr_t ptr, std::size_t size) {
      if (sv.blocks.empty()) {
        sv.ptr = ptr;
        sv.stream = b->stream;
        sv.small = b->small;
        sv.expandable = expandable;
      }
      block_view bv;
      bv.ptr = ptr;
      bv.size = size;
      sv.total_size += size;
      if (b->allocated) {
        bv.requested = b->requested;
        bv.state = block_state::active_allocated;
        sv.allocated_size += b->size;
        sv.active_size += b->size;
        sv.requested_size += b->requested;
      } else if (b->pending_events > 0) {
        bv.state = block_state::active_pending_free;
        sv.active_size += b->size;
      } else {
        bv.state = block_state::inactive;
      }
      sv.blocks.push_back(bv);
    };
    for (const block* b = h; b; b = b->next) {
      if (!b->mapped) {
        flush();
      } else if (b->range && b->in_free_set) {
        m.for_each_part(b, [&](std::uintptr_t p, std::size_t n, bool resident) {
          if (resident)
            add(b, p, n);
          else
            flush();
        });
      } else {
        add(b, b->ptr, b->size);
      }
    }
    flush();
  };
  for (const block* h : m.segments) view(h, false);
  for (const auto& r : m.ranges) view(r->head, true);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
  return out;
}

void to_json(nlohmann::json& j, const memory_stat& s) {
  j = {{"current", s.current}, {"peak", s.peak}, {"allocated", s.allocated}, {"freed", s.freed}};
}

void to_json(nlohmann::json& j, const pool_stats& s) {
  j = {{"allocated_bytes", s.allocated_bytes},
       {"requested_bytes", s.requested_bytes},
       {"reserved_bytes", s.reserved_bytes},
       {"active_bytes", s.active_bytes},
       {"inactive_split_bytes", s.inactive_split_bytes},
       {"allocation_count", s.allocation_count},
       {"segment_count", s.segment_count},
       {"active_count", s.active_count},
       {"inactive_split_count", s.inactive_split_count}};
}

void to_json(nlohmann::json& j, const allocator_stats& s) {
  to_json(j, static_cast<const pool_stats&>(s));
  j.update(nlohmann::json{{"device_allocations", s.device_allocations},
                          {"device_frees", s.device_frees},
                          {"alloc_retries", s.alloc_retries},
                          {"ooms", s.ooms},
                          {"device_syncs", s.device_syncs},
                          {"device_call_ns", s.device_call_ns},
                          {"pages_retired", s.pages_retired},
                          {"pages_reclaimed", s.pages_reclaimed},
                          {"cache_claims", s.cache_claims},
                          {"cache_claim_ns", s.cache_claim_ns},
                          {"cached_free_bytes", s.cached_free_bytes},
                          {"largest_free_block_bytes", s.largest_free_block},
                          {"fragmentation", s.fragmentation}});
}

void to_json(nlohmann::json& j, const empty_cache_report& r) {
  j = {{"released_bytes", r.released_bytes},
       {"released_segments", r.released_segments},
       {"kept_bytes", r.kept_bytes},
       {"kept_in_use_segments", r.kept_in_use_segments},
       {"kept_pending_segments", r.kept_pending_segments}};
}

void to_json(nlohmann::json& j, const history_event& e) {
  j = {{"kind", to_string(e.kind)},
       {"time_ns", e.time_ns},
       {"ptr", e.ptr},
       {"bytes", e.bytes},
       {"stream", e.stream}};
}

std::vector<memory_usage_point> memory_usage(const std::vector<history_event>& history,
                                             std::int64_t allocated_before,
                                             std::int64_t reserved_before) {
  std::vector<memory_usage_point> out;
  out.reserve(history.size());
  memory_usage_point now{0, allocated_before, reserved_before};
  for (const auto& e : history) {
    const auto bytes = static_cast<std::int64_t>(e.bytes);
    switch (e.kind) {
      case history_kind::alloc:
        now.allocated_bytes += bytes;
        break;
      case history_kind::free:
        now.allocated_bytes -= bytes;
        break;
      case history_kind::segment_alloc:
        now.reserved_bytes += bytes;
        break;
      case history_kind::segment_free:
        now.reserved_bytes -= bytes;
        break;
      case history_kind::segment_map:
        now.reserved_bytes += bytes;
        break;
      case history_kind::segment_unmap:
        now.reserved_bytes -= bytes;
        break;
      case history_kind::oom:
      case history_kind::free_completed:
        continue;
    }
    now.time_ns = e.time_ns;
    out.push_back(now);
  }
  return out;
}

}  // namespace gpu_basics

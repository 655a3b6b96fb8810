// Giving cached memory back to the backend: empty_cache (release_cached) and PyTorch's garbage
// collection of whole free segments past a threshold of the reserved limit.
#include <vector>

#include "caching_allocator_impl.hpp"

namespace gpu_basics {

void caching_allocator::impl::release_segment(block* h) {
  remove_free(h);
  timed([&] { backend.deallocate(reinterpret_cast<void*>(h->ptr), h->segment_bytes); });
  count(h->small, [&](pool_stats& s) {
    s.reserved_bytes.sub(static_cast<std::int64_t>(h->segment_bytes));
    s.segment_count.sub(1);
  });
  ++st.device_frees;
  record(history_kind::segment_free, h->ptr, h->segment_bytes, h->stream);
  segments.erase(h);
  retire(h);
}

/// PyTorch's garbage_collect_cached_blocks: past the threshold of the reserved limit, return
/// whole free large segments that have waited longest (older than the average first).
void caching_allocator::impl::garbage_collect() {
  const auto threshold = static_cast<std::size_t>(o.garbage_collection_threshold *
                                                  static_cast<double>(o.reserved_limit));
  const auto reserved = static_cast<std::size_t>(st.reserved_bytes.current);
  if (reserved <= threshold) return;
  const std::size_t target = reserved - threshold;
  std::vector<block*> candidates;
  std::uint64_t total_age = 0;
  for (block* b : large_free)
    if (!b->is_split() && !b->range) {
      candidates.push_back(b);
      total_age += large_lookups - b->gc_count_base;
    }
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && !candidates.empty()) {
    const double threshold_age =
        static_cast<double>(total_age) / static_cast<double>(candidates.size());
    freed = false;
    for (std::size_t i = 0; i < candidates.size();) {
      block* b = candidates[i];
      const std::uint64_t age = large_lookups - b->gc_count_base;
      if (static_cast<double>(age) >= threshold_age) {
        reclaimed += b->size;
        total_age -= age;
        candidates[i] = candidates.back();
        candidates.pop_back();
        release_segment(b);
        freed = true;
      } else {
        ++i;
      }
    }
  }
}

empty_cache_report caching_allocator::impl::release_cached() {
  sweep_caches(sweep_mode::adopt);
  empty_cache_report r;
  for (auto it = segments.begin(); it != segments.end();) {
    block* h = *it;
    ++it;
    if (!h->next && h->is_free() && h->in_free_set) {
      r.released_bytes += h->segment_bytes;
      ++r.released_segments;
      release_segment(h);
    }
  }
  // Pages of expandable ranges go at once: the GPU must be done with them first.
  std::size_t mapped_before = 0;
  bool unmapping = !retiring.empty();
  for (const auto& rg : ranges) {
    mapped_before += rg->mapped_bytes;
    for_each_free_page(*rg, [&](expandable_range&, std::size_t) { unmapping = true; });
  }
  if (unmapping) {
    synchronize_device();
    poll_retirements(true);
  }
  std::size_t mapped_after = 0;
  for (const auto& rg : ranges) {
    std::vector<block*> free_blocks;
    for (block* b = rg->head; b; b = b->next)
      if (b->in_free_set) free_blocks.push_back(b);
    for (block* b : free_blocks) unmap_block(b);
    mapped_after += rg->mapped_bytes;
  }
  r.released_bytes += mapped_before - mapped_after;
  // What is kept, and why: a block still allocated, or one awaiting other streams' events.
  const auto kept = [&r](const block* head, std::size_t bytes) {
    r.kept_bytes += bytes;
    bool in_use = false, waiting = false;
    for (const block* b = head; b; b = b->next) {
      in_use |= b->allocated;
      waiting |= !b->allocated && b->pending_events > 0;
    }
    if (in_use)
      ++r.kept_in_use_segments;
    else if (waiting)
      ++r.kept_pending_segments;
  };
  for (const block* h : segments) kept(h, h->segment_bytes);
  for (const auto& rg : ranges) kept(rg->head, rg->mapped_bytes);
  return r;
}

}  // namespace gpu_basics

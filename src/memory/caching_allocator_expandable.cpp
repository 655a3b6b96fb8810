// Expandable segments: one growable address range per stream and pool, mapped in pages;
// pages inside free blocks given back under the page_release policy (keep, eager, deferred
// behind events), and the ranges' blocks mapped and unmapped as PyTorch places them.
#include <algorithm>
#include <memory>
#include <vector>

#include "caching_allocator_impl.hpp"

namespace gpu_basics {

expandable_range* caching_allocator::impl::new_range(stream_handle stream, bool small) {
  const std::size_t page = small ? kSmallSegment : kLargeSegment;
  const std::size_t want = backend.address_space_bytes();
  const std::size_t bytes = std::max(page, (want + page - 1) / page * page);
  const std::uintptr_t base = backend.reserve_address(bytes);
  if (!base) return nullptr;
  auto r = std::make_unique<expandable_range>();
  r->base = base;
  r->bytes = bytes;
  r->page = page;
  r->stream = stream;
  r->small = small;
  block* b = new_block(base, bytes, stream, small);
  b->mapped = false;
  b->range = r.get();
  r->head = b;
  unmapped_of(b).insert(b);
  ranges.push_back(std::move(r));
  count(small, [](pool_stats& s) { s.segment_count.add(1); });
  return ranges.back().get();
}

/// Maps the first `bytes` (rounded up to pages) of the unmapped block `u` into the range's
/// blocks: the mapped part becomes a free block merged with free neighbours. Its pages get
/// memory only when a block in use needs them (make_resident).
void caching_allocator::impl::map_block(block* u, std::size_t bytes) {
  expandable_range& r = *u->range;
  const std::size_t n = std::min(u->size, (bytes + r.page - 1) / r.page * r.page);
  unmapped_of(u).erase(u);
  if (n < u->size) {  // the rest stays unmapped, after u
    block* rest = split_off(u, n);
    rest->mapped = false;
    unmapped_of(rest).insert(rest);
  }
  u->mapped = true;
  const std::size_t pages = std::max(r.pages.size(), r.page_of(u->ptr + n - 1) + 1);
  r.pages.resize(pages, page_state::none);
  r.ticket.resize(pages, 0);
  merge_and_insert(u);
}

/// Gives the whole resident pages inside free blocks of `stream`'s ranges of one pool back
/// to the device; the blocks stay free where they are. Called before a range takes more
/// memory (PyTorch keeps such pages until empty_cache or an OOM retry): the block layout is
/// PyTorch's, and the pages with memory are a subset of PyTorch's at every moment, so peak
/// reserved can only be lower. On a real transformer trace recorded on the H200 this took
/// peak reserved / peak live from 1.103 (PyTorch's own figure) to 1.039.
///
/// Note [Deferred page release]: the freed blocks' last kernels may still be queued on the
/// stream, so a page can only go once they are done. Eager synchronises the device once per
/// release (not once per page, as this allocator first did): the lowest peak, but each release
/// drains the CPU's lead over the GPU. Deferred records one event per range instead and unmaps
/// at a later allocator call once it is done; a page some block needs again before then is
/// taken back (no unmap, no map). On an H200 training loop (bench/torch_step_time.py) the GPU
/// ran a step behind, so deferred pages were still busy at every peak: the same peak as keep,
/// with twice the maps. Keep, PyTorch's behaviour, is the default: its peak and maps are
/// PyTorch's by construction. Pages keep their memory, and count as reserved, until unmapped,
/// so the subset guarantee holds for all three.
void caching_allocator::impl::release_free_pages(bool small, stream_handle stream) {
  if (o.release_pages == page_release::keep) return;
  const bool eager = o.release_pages == page_release::eager;
  if (eager) {
    bool any = false;
    for_each_free_page(small, stream, [&](expandable_range&, std::size_t) { any = true; });
    if (!any) return;
    synchronize_device();
  }
  for (const auto& rg : ranges) {
    if (rg->small != small || rg->stream != stream) continue;
    if (eager) {
      for (block* b = rg->head; b; b = b->next)
        if (b->in_free_set) release_pages(*rg, b->ptr, b->ptr + b->size);
      continue;
    }
    retirement t;
    t.range = rg.get();
    for_each_free_page(*rg, [&](expandable_range& r, std::size_t i) {
      if (r.pages[i] == page_state::resident) t.pages.push_back(i);
    });
    if (t.pages.empty()) continue;
    // The event first: if recording it throws, no page has changed state.
    t.event = timed([&] { return backend.record_event(rg->stream); });
    t.ticket = ++next_ticket;
    for (const std::size_t i : t.pages) {
      rg->pages[i] = page_state::retiring;
      rg->ticket[i] = t.ticket;
    }
    st.pages_retired += static_cast<std::int64_t>(t.pages.size());
    retiring.push_back(std::move(t));
  }
  poll_retirements();  // an idle GPU: they go at once
}

/// Unmaps the pages of retirements whose events are done (all of them with `all`, after the
/// caller synchronised the device), except pages a block took back since.
void caching_allocator::impl::poll_retirements(bool all) {
  std::size_t kept = 0, k = 0;
  // On every way out, a throwing event query or unmap included: drop the entries handled or
  // moved down ([kept, k)); those from k on are untouched.
  struct compact {
    std::vector<retirement>& v;
    const std::size_t& kept;
    const std::size_t& k;
    ~compact() {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(kept),
              v.begin() + static_cast<std::ptrdiff_t>(k));
    }
  } guard{retiring, kept, k};
  while (k < retiring.size()) {
    retirement& entry = retiring[k];
    if (!all && !timed([&] { return backend.event_done(entry.event); })) {
      if (kept != k) retiring[kept] = std::move(entry);  // never onto itself: that empties pages
      ++kept;
      ++k;
      continue;
    }
    retirement t = std::move(entry);
    ++k;  // handled, whatever happens below
    backend.release_event(t.event);
    expandable_range& r = *t.range;
    std::sort(t.pages.begin(), t.pages.end());
    const auto still = [&](std::size_t i) {  // not taken back, nor retired again since
      return r.pages[i] == page_state::retiring && r.ticket[i] == t.ticket;
    };
    for (std::size_t q = 0; q < t.pages.size();) {  // runs of pages still retiring
      const std::size_t i = t.pages[q];
      if (!still(i)) {
        ++q;
        continue;
      }
      std::size_t j = q + 1;
      while (j < t.pages.size() && t.pages[j] == t.pages[j - 1] + 1 && still(t.pages[j])) ++j;
      unmap_pages(r, i, i + (j - q));
      q = j;
    }
  }
}

/// Unmaps pages [first, last) of r, all with memory, and counts them out of reserved.
void caching_allocator::impl::unmap_pages(expandable_range& r, std::size_t first,
                                          std::size_t last) {
  timed([&] {
    for (std::size_t i = first; i < last; ++i) backend.unmap(r.base + i * r.page, r.page);
  });
  for (std::size_t i = first; i < last; ++i) r.pages[i] = page_state::none;
  const std::size_t n = (last - first) * r.page;
  r.mapped_bytes -= n;
  count(r.small, [&](pool_stats& s) { s.reserved_bytes.sub(static_cast<std::int64_t>(n)); });
  ++st.device_frees;
  record(history_kind::segment_unmap, r.base + first * r.page, n, r.stream);
}

/// Bytes of block b that have memory behind them.
std::size_t caching_allocator::impl::resident_size(const block* b) const {
  if (!b->range) return b->size;
  std::size_t n = 0;
  for_each_part(b, [&](std::uintptr_t, std::size_t bytes, bool resident) {
    if (resident) n += bytes;
  });
  return n;
}

/// Unmaps the pages with memory wholly inside [from, to) at once: the caller has made sure
/// the GPU is done with them (a device synchronisation).
void caching_allocator::impl::release_pages(expandable_range& r, std::uintptr_t from,
                                            std::uintptr_t to) {
  const std::size_t first = r.page_of(from + r.page - 1);
  const std::size_t last = r.page_of(to);  // one past
  for (std::size_t i = first; i < last;) {
    if (!r.is_resident(i)) {
      ++i;
      continue;
    }
    const std::size_t run = i;
    while (i < last && r.is_resident(i)) ++i;
    unmap_pages(r, run, i);
  }
}

/// Backs every page that b touches with memory, giving free pages of the same pool and stream
/// back first (other threads' cached blocks merged in, so that their pages can go too). False
/// when the device or the reserved limit has no room: b's pages are then as they were.
bool caching_allocator::impl::make_resident(block* b, bool& mapped_any) {
  expandable_range& r = *b->range;
  const std::size_t first = r.page_of(b->ptr), last = r.page_of(b->ptr + b->size - 1) + 1;
  std::size_t missing = 0;
  for (std::size_t i = first; i < last; ++i) {
    if (r.state(i) == page_state::retiring) {  // still has its memory: take it back
      r.pages[i] = page_state::resident;
      ++st.pages_reclaimed;
    }
    missing += !r.is_resident(i);
  }
  if (missing == 0) return true;
  // Free pages go back only when reserved would otherwise pass its highest mark (or the
  // limit): below it they cost no peak, and mapping them again costs time.
  const std::size_t need = missing * r.page;
  if (static_cast<std::size_t>(st.reserved_bytes.current) + need > reserved_high ||
      !within_limit(need)) {
    if (caches_hold_blocks())
      sweep_caches(sweep_mode::empty);  // b is outside the free set: not merged
    release_free_pages(b->small, b->stream);
  }
  if (!within_limit(need) && !retiring.empty()) {  // the limit is hard: wait for the GPU
    synchronize_device();
    poll_retirements(true);
  }
  if (!within_limit(need)) return false;
  std::vector<std::size_t> done;
  done.reserve(missing);
  const auto undo = [&] {  // pages this call mapped, never used: no synchronisation needed
    timed([&] {
      for (std::size_t i : done) backend.unmap(r.base + i * r.page, r.page);
    });
  };
  try {
    timed([&] {
      for (std::size_t i = first; i < last; ++i) {
        if (r.is_resident(i)) continue;
        if (!backend.map(r.base + i * r.page, r.page)) break;
        done.push_back(i);
      }
    });
  } catch (...) {  // a failure other than out of memory: give back what this call mapped
    undo();
    throw;
  }
  if (done.size() < missing) {
    undo();
    return false;
  }
  for (std::size_t i : done) r.pages[i] = page_state::resident;
  r.mapped_bytes += need;
  add_reserved(need, r.small);
  ++st.device_allocations;
  for (std::size_t k = 0; k < done.size();) {  // one history event per run of pages
    std::size_t j = k;
    while (j + 1 < done.size() && done[j + 1] == done[j] + 1) ++j;
    record(history_kind::segment_map, r.base + done[k] * r.page, (j - k + 1) * r.page, r.stream);
    k = j + 1;
  }
  mapped_any = true;
  return true;
}

/// A free block of at least `rounded` bytes on `stream` in an expandable range, mapping what
/// is missing (PyTorch's try_allocate_expandable_block); it stays in the free set.
block* caching_allocator::impl::expandable_block(std::size_t rounded, bool small,
                                                 stream_handle stream) {
  const auto usable = [](const block* b) { return b && b->in_free_set; };
  unmapped_set& u = small ? small_unmapped : large_unmapped;
  block key;
  key.stream = stream;
  key.ptr = 0;
  block* c = nullptr;
  for (auto it = u.lower_bound(&key); it != u.end() && (*it)->stream == stream; ++it) {
    block* cand = (*it)->prev && usable((*it)->prev) ? (*it)->prev : *it;
    std::size_t room = 0;
    for (block* b = cand; b && room < rounded && (usable(b) || !b->mapped); b = b->next)
      room += b->size;
    if (room >= rounded) {
      c = cand;
      break;
    }
  }
  if (!c) {
    expandable_range* r = new_range(stream, small);
    if (!r) return nullptr;
    c = r->head;
    if (c->size < rounded) return nullptr;
  }
  // c is unmapped, or free and followed by unmapped space: map until it is large enough.
  if (!c->mapped) {
    block* prev = c->prev;
    const bool prev_free = prev && prev->in_free_set;
    map_block(c, rounded);
    if (prev_free) c = prev;  // map_block merged the mapped part into its free neighbour
  }
  while (c->size < rounded) {
    block* u2 = c->next;
    if (!u2 || u2->mapped) return nullptr;
    map_block(u2, rounded - c->size);  // merges into c
  }
  return c;
}

/// Unmaps the whole pages inside the free block b of an expandable range (PyTorch's
/// unmap_block): they leave the range's blocks (and their memory, if they have any, goes
/// back); what lies before and after them stays a free mapped block.
void caching_allocator::impl::unmap_block(block* b) {
  expandable_range& r = *b->range;
  const std::uintptr_t first = r.base + (b->ptr - r.base + r.page - 1) / r.page * r.page;
  const std::uintptr_t last = r.base + (b->ptr + b->size - r.base) / r.page * r.page;
  if (last <= first) return;
  remove_free(b);
  block* mid = b;
  if (first > b->ptr) {  // b keeps the part before; mid is new
    mid = split_off(b, first - b->ptr);
    insert_free(b);
  }
  if (mid->ptr + mid->size > last)  // the part after stays free
    insert_free(split_off(mid, last - mid->ptr));
  release_pages(r, mid->ptr, mid->ptr + mid->size);
  mid->mapped = false;
  unmapped_set& u = unmapped_of(mid);
  if (mid->prev && !mid->prev->mapped) {  // merge with unmapped neighbours
    block* a = mid->prev;
    u.erase(a);
    absorb(a, mid);
    mid = a;
  }
  if (mid->next && !mid->next->mapped) {
    block* n = mid->next;
    u.erase(n);
    absorb(mid, n);
  }
  u.insert(mid);
}

}  // namespace gpu_basics

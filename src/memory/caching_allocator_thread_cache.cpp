// Thread caches, seen from the shared cache: sweeping them (counters folded, cached blocks
// merged back, what their threads handed out adopted into the shared map), and which freed
// blocks may wait in one. Their fast paths and per-thread slots are in caching_allocator.cpp.
#include <mutex>

#include "caching_allocator_impl.hpp"

namespace gpu_basics {

/// Sweeps every thread cache; orphaned caches are emptied and adopted whatever the mode, and
/// deleted.
void caching_allocator::impl::sweep_caches(sweep_mode mode) {
  for (std::size_t i = 0; i < caches.size();) {
    thread_cache& c = *caches[i];
    const bool orphan = c.orphaned.load(std::memory_order_acquire);
    {
      std::lock_guard lock(c.lock);
      sweep(c, orphan || mode != sweep_mode::fold);
      if (orphan || mode == sweep_mode::adopt) {
        for (std::size_t k = 0; k < c.n_out; ++k) {
          c.out[k]->owner = nullptr;
          active.insert(c.out[k]->ptr, c.out[k]);
        }
        c.n_out = 0;
      }
    }
    if (orphan) {
      orphans.fetch_sub(1, std::memory_order_relaxed);
      caches[i] = std::move(caches.back());
      caches.pop_back();
    } else {
      ++i;
    }
  }
}

/// A live allocation handed out by some thread's fast path: moved into the shared map (its
/// counters with it), so the caller can treat it as any other.
block* caching_allocator::impl::adopt_from_caches(std::uintptr_t p) {
  for (auto& cp : caches) {
    thread_cache& c = *cp;
    std::lock_guard lock(c.lock);
    for (std::size_t k = 0; k < c.n_out; ++k) {
      block* b = c.out[k];
      if (b->ptr != p) continue;
      c.out[k] = c.out[--c.n_out];
      fold(c);
      ++c.epoch;
      b->owner = nullptr;
      active.insert(b->ptr, b);
      return b;
    }
  }
  return nullptr;
}

/// Whether the freed block b may wait in a thread cache for the next request of its size
/// without changing what merge-on-free would do. Merge-on-free would merge b with a free right
/// neighbour into M (a free left one would move the block: then no), and the next request of
/// b's size would split M at b's address if find_free() would pick M: walking the free blocks
/// of the stream from b's size up in find_free()'s order, with M in place of the neighbour.
/// Then handing b out again, with the neighbour left as it is, is the same placement.
bool caching_allocator::impl::cacheable(const block* b) {
  if (b->prev && b->prev->in_free_set) return false;
  const block* n = b->next && b->next->in_free_set ? b->next : nullptr;
  const std::size_t merged = b->size + (n ? n->size : 0);
  // find_free()'s rules for oversize blocks, applied to M.
  if (b->size < o.max_split_size && merged >= o.max_split_size) return false;
  if (b->size >= o.max_split_size && merged >= b->size + kLargeSlack) return false;
  const block* after = n ? n->next : b->next;
  struct candidate {
    std::size_t size = 0;
    std::uintptr_t ptr = 0;
    std::size_t growable = 0;  // as find_free counts it for range blocks
    bool range = false;
    bool merged = false;
  };
  const candidate m{merged, b->ptr, merged + (after && !after->mapped ? after->size : 0),
                    b->range != nullptr, true};
  const free_set& p = pool_of(b);
  block key;
  key.stream = b->stream;
  key.size = b->size;
  key.ptr = 0;
  auto it = p.lower_bound(&key);
  bool m_pending = true;
  // The next candidate in find_free()'s order: M or the next block of the set (n skipped).
  const auto next = [&](candidate& c) {
    if (it != p.end() && *it == n) ++it;
    const bool in_set = it != p.end() && (*it)->stream == b->stream;
    if (m_pending &&
        (!in_set || m.size < (*it)->size || (m.size == (*it)->size && m.ptr < (*it)->ptr))) {
      m_pending = false;
      c = m;
      return true;
    }
    if (!in_set) return false;
    const block* x = *it++;
    c = {x->size, x->ptr, x->size + (x->next && !x->next->mapped ? x->next->size : 0),
         x->range != nullptr, false};
    return true;
  };
  candidate pick, c;
  (void)next(pick);  // M at least
  while (pick.range && next(c) && c.growable < pick.growable) pick = c;
  return pick.merged;
}

}  // namespace gpu_basics

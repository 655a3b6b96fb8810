// Thread caches, seen from the shared cache: the handshake that lets the allocator's lock
// holder claim them, sweeping them (counters folded, cached blocks merged back, what their
// threads handed out adopted into the shared map), and which freed blocks may wait in one.
// Their fast paths and per-thread slots are in caching_allocator.cpp.
#include <chrono>
#include <thread>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "caching_allocator_impl.hpp"

namespace gpu_basics {

namespace allocator_detail {

namespace {
bool register_membarrier() noexcept {
#if defined(__linux__) && !defined(__SANITIZE_THREAD__) && defined(SYS_membarrier)
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
  return false;
#endif
}
}  // namespace

bool asymmetric_fences() noexcept {
  static const bool registered = register_membarrier();
  return registered;
}

void heavy_fence(bool asymmetric) noexcept {
  // Symmetric: both sides' sequentially consistent accesses order themselves.
  if (!asymmetric) return;
#if defined(__linux__) && defined(SYS_membarrier) && !defined(__SANITIZE_THREAD__)
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  // Registration belongs to the address space: a child of fork() has to register again.
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
    return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace allocator_detail

caching_allocator::impl::cache_claim::cache_claim(const impl& m) : m_(m) {
  if (m.claim_depth++ > 0) return;
  const thread_cache* mine = m.calling_thread_cache();
  bool any = false;
  for (const auto& c : m.caches) {
    if (c.get() == mine || c->orphaned.load(std::memory_order_acquire)) continue;
    c->hs.claimed.store(1, m.asymmetric ? std::memory_order_relaxed : std::memory_order_seq_cst);
    any = true;
  }
  if (!any) return;  // one thread: nobody to wait for, no fence to pay
  const auto t0 = std::chrono::steady_clock::now();
  heavy_fence(m.asymmetric);
  for (const auto& c : m.caches) {
    if (!c->hs.claimed.load(std::memory_order_relaxed)) continue;
    // The owner's section lasts a few dozen nanoseconds, unless it was preempted inside one.
    for (int spins = 0; c->hs.busy.load(std::memory_order_seq_cst) != 0; ++spins) {
      if (spins > 64) {
        std::this_thread::yield();
        spins = 0;
      } else {
        cpu_relax();
      }
    }
  }
  ++m.claims;
  m.claim_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

caching_allocator::impl::cache_claim::~cache_claim() {
  if (--m_.claim_depth > 0) return;
  for (const auto& c : m_.caches)
    if (c->hs.claimed.load(std::memory_order_relaxed))
      c->hs.claimed.store(0, std::memory_order_release);
}

/// Sweeps every thread cache; orphaned caches are emptied and adopted whatever the mode, and
/// deleted.
void caching_allocator::impl::sweep_caches(sweep_mode mode) {
  const cache_claim claim(*this);
  sweep_caches(mode, true);
}

/// Caches of threads that ended, emptied into the shared cache and deleted; live caches are left
/// alone (nothing to claim).
void caching_allocator::impl::reclaim_orphans() {
  sweep_caches(sweep_mode::fold, false);
}

void caching_allocator::impl::sweep_caches(sweep_mode mode, bool live_too) {
  for (std::size_t i = 0; i < caches.size();) {
    thread_cache& c = *caches[i];
    const bool orphan = c.orphaned.load(std::memory_order_acquire);
    if (!orphan && !live_too) {
      ++i;
      continue;
    }
    sweep(c, orphan || mode != sweep_mode::fold);
    if (orphan || mode == sweep_mode::adopt) adopt_handed_out(c);
    if (orphan) {
      orphans.fetch_sub(1, std::memory_order_relaxed);
      caches[i] = std::move(caches.back());
      caches.pop_back();
    } else {
      ++i;
    }
  }
}

/// The blocks cache c handed out, moved into the shared map (their counters are folded).
void caching_allocator::impl::adopt_handed_out(thread_cache& c) {
  for (std::size_t k = 0; k < c.n_out; ++k) {
    c.out[k]->owner = nullptr;
    active.insert(c.out[k]->ptr, c.out[k]);
  }
  c.n_out = 0;
}

/// A live allocation handed out by some thread's fast path: moved into the shared map (its
/// counters with it), so the caller can treat it as any other. The cache that handed it out
/// gives up all it handed out at once: a thread that frees another's blocks (PyTorch's autograd
/// thread freeing the forward pass's tensors) then finds the rest in the shared map, and the
/// claim (a heavy fence) is paid once for the lot, not once per block.
block* caching_allocator::impl::adopt_from_caches(std::uintptr_t p) {
  const cache_claim claim(*this);
  for (auto& cp : caches) {
    thread_cache& c = *cp;
    std::size_t k = 0;
    while (k < c.n_out && c.out[k]->ptr != p) ++k;
    if (k == c.n_out) continue;
    block* found = c.out[k];
    fold(c);
    ++c.epoch;
    adopt_handed_out(c);
    return found;
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
  // find_free()'s rule for oversize blocks, applied to M serving a request of b's size.
  if (oversize_block_refused(merged, b->size, o)) return false;
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

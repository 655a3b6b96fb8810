// The caching allocator's internals, shared by its source files (private to the memory module):
// the block records and their sets, expandable ranges, thread caches, and caching_allocator::impl.
//
//   caching_allocator.cpp               options and rounding; the alloc/free paths, shared and
//                                       through thread caches; the per-thread cache slots; the
//                                       public methods
//   caching_allocator_thread_cache.cpp  sweeping thread caches, adopting what they handed out,
//                                       and which freed blocks may wait in one
//   caching_allocator_expandable.cpp    expandable ranges: mapping, page release, retirements
//   caching_allocator_release.cpp       giving memory back: empty_cache, garbage collection
//   caching_allocator_introspect.cpp    stats, history, segments, the OOM report, JSON
//
// Members declared `inline` below are defined in the one file that uses them, so the compiler
// may fold them into their callers there; the small helpers every file uses are defined here.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cache_fence.hpp"
#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/event_poll.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "pointer_map.hpp"
#include "spin_lock.hpp"

namespace gpu_basics::allocator_detail {

constexpr std::size_t kMinBlock = 512;           // rounding unit and smallest block
constexpr std::size_t kSmallRequest = 1 << 20;   // requests up to 1 MiB use the small pool
constexpr std::size_t kSmallSegment = 2 << 20;   // small pool segments
constexpr std::size_t kLargeSegment = 20 << 20;  // segments for 1-10 MiB requests
constexpr std::size_t kMediumLimit = 10 << 20;
constexpr std::size_t kRoundLarge = kLargePageBytes;  // large requests round to 2 MiB segments

struct block;
struct thread_cache;
struct expandable_range;

/// Free blocks best-fit: by stream, then size, then address (PyTorch's BlockComparatorSize).
struct block_less {
  bool operator()(const block* a, const block* b) const noexcept;
};
/// Unmapped parts of expandable ranges: by stream, then address (BlockComparatorAddress).
struct block_address_less {
  bool operator()(const block* a, const block* b) const noexcept;
};
using free_set = std::set<block*, block_less>;
using unmapped_set = std::set<block*, block_address_less>;

/// Aligned to a cache line: blocks of different threads' caches are written by their threads'
/// fast paths, and must not share one.
struct alignas(64) block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  stream_handle stream = 0;
  bool small = false;
  bool allocated = false;
  bool in_free_set = false;
  bool mapped = true;  // false: an unmapped part of an expandable range
  int pending_events = 0;
  block* prev = nullptr;
  block* next = nullptr;
  std::size_t segment_bytes = 0;      // set on a plain segment's first block
  expandable_range* range = nullptr;  // the expandable range this block is part of
  thread_cache* owner = nullptr;      // the thread cache holding it (cached or handed out)
  std::uint64_t gc_count_base = 0;    // the pool's lookup count when it was last freed
  std::uint64_t epoch = 0;            // its thread cache's epoch when that cache handed it out
  std::vector<stream_handle> stream_uses;
  // Container node kept while the block is outside the free set, so the hot path reinserts
  // without allocating.
  free_set::node_type free_node;

  [[nodiscard]] bool is_split() const noexcept { return prev || next; }
  [[nodiscard]] bool is_free() const noexcept { return !allocated && pending_events == 0; }
};

inline bool block_less::operator()(const block* a, const block* b) const noexcept {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

inline bool block_address_less::operator()(const block* a, const block* b) const noexcept {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->ptr < b->ptr;
}

/// What backs one page of an expandable range.
enum class page_state : std::uint8_t {
  none,      // no memory
  resident,  // memory
  retiring,  // memory, to be unmapped once its retirement's event is done (page_release::deferred)
};

/// One stream's growable address range (expandable segments): reserved once, mapped in pages.
/// Two levels: the blocks (mapped or not, as PyTorch places them: the range grows at its end),
/// and the pages backed by physical memory (`pages`). A page of a mapped block may be without
/// memory (or retiring) while it lies wholly inside free blocks; a page touched by a block in use
/// is always resident; an unmapped block never has memory.
struct expandable_range {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;  // address space reserved
  std::size_t page = 0;   // mapping unit: 2 MiB (small pool) or 20 MiB (large pool)
  stream_handle stream = 0;
  bool small = false;
  block* head = nullptr;  // the block at `base` (blocks only merge into their left neighbour)
  std::size_t mapped_bytes = 0;       // bytes of pages with memory (what the range reserves)
  std::vector<page_state> pages;      // per page from `base`, as far as blocks were ever mapped
  std::vector<std::uint64_t> ticket;  // per page: the retirement that made it retiring

  [[nodiscard]] std::size_t page_of(std::uintptr_t p) const noexcept { return (p - base) / page; }
  [[nodiscard]] page_state state(std::size_t i) const noexcept {
    return i < pages.size() ? pages[i] : page_state::none;
  }
  /// Whether page i has memory behind it (resident or retiring).
  [[nodiscard]] bool is_resident(std::size_t i) const noexcept {
    return state(i) != page_state::none;
  }
};

/// Pages of one range retired together, unmapped once `event` (recorded on the range's stream
/// after the blocks holding them were freed) is done; a page taken back since is left alone.
struct retirement {
  event_handle event = nullptr;
  expandable_range* range = nullptr;
  std::uint64_t ticket = 0;
  std::vector<std::size_t> pages;
};

/// Changes of one counter made by a thread's fast path since it was last folded into the
/// allocator's stats: `now` is the net change, `high` its highest value since the fold.
struct stat_delta {
  std::int64_t now = 0, high = 0, added = 0, removed = 0;
  void add(std::int64_t n) noexcept {
    now += n;
    added += n;
    high = std::max(high, now);
  }
  void sub(std::int64_t n) noexcept {
    now -= n;
    removed += n;
  }
  /// Adds the changes to `s`: the peak reached while only this thread moved the counter is
  /// s.current at the last fold plus `high`.
  void apply_to(memory_stat& s) const noexcept {
    s.peak = std::max(s.peak, s.current + high);
    s.current += now;
    s.allocated += added;
    s.freed += removed;
  }
};

/// A thread's cache of small blocks it freed (`cached`), and of those it handed out again from
/// there (`out`): both without the allocator's lock. The owning thread works on it inside an
/// owner_section (cache_fence.hpp: with membarrier, plain stores and loads, no atomic
/// read-modify-write), or under the allocator's lock; other threads touch it only under the
/// allocator's lock and after claiming it (impl::cache_claim), when they empty it or look for a
/// pointer handed out by it. `epoch` moves whenever the shared cache may have changed under the
/// blocks handed out (the owner's own shared operations, and sweeps of this cache by others):
/// such a block then goes back through the shared cache, merged as plain merge-on-free would
/// merge it.
constexpr std::size_t kMaxThreadCache = 64;

/// Aligned to two cache lines, so that threads' caches never share one (false sharing would
/// make every fast operation of one thread a cache miss for its neighbour).
struct alignas(128) thread_cache {
  explicit thread_cache(std::size_t blocks) : capacity(blocks) {}
  cache_handshake hs;
  std::size_t capacity;
  std::size_t n_cached = 0, n_out = 0;
  std::uint64_t epoch = 0;
  std::array<block*, kMaxThreadCache> cached{};  // free blocks, not in any free set
  std::array<block*, kMaxThreadCache> out{};     // allocated blocks handed out by the fast path
  stat_delta bytes, requested, count;
  // n_cached as others may read it without claiming the cache: a hint that it holds blocks.
  std::atomic<std::size_t> cached_hint{0};
  std::atomic<bool> orphaned{false};  // its thread has ended (or forgot it): the allocator frees it
  std::atomic<std::size_t>* orphans = nullptr;  // the allocator's count of orphaned caches

  void set_cached(std::size_t n) noexcept {
    n_cached = n;
    cached_hint.store(n, std::memory_order_relaxed);
  }
};

}  // namespace gpu_basics::allocator_detail

namespace gpu_basics {

// The allocator's files name its internal types unqualified.
using namespace allocator_detail;

struct caching_allocator::impl {
  allocator_backend& backend;
  allocator_options o;
  const std::uint64_t id;
  const bool vmm;             // expandable segments in use
  const bool fast_ok;         // thread caches in use
  const bool plain_rounding;  // no roundup_power2_divisions: 512-byte steps
  const bool asymmetric;      // the thread-cache handshake's fences (cache_fence.hpp)
  std::atomic<bool> traced{false};
  // Everything below is written under the shared lock; on cache lines of its own, away from
  // what the fast paths read above, so a shared operation does not stall other threads.
  alignas(128) mutable spin_lock mutex;
  std::atomic<std::size_t> orphans{0};  // caches whose threads ended, not yet reclaimed
  std::size_t reserved_high = 0;        // highest reserved so far (never reset): see make_resident
  free_set small_free, large_free;
  unmapped_set small_unmapped, large_unmapped;
  std::uint64_t small_lookups = 0, large_lookups = 0;  // for garbage collection ages
  pointer_map active;
  std::unordered_set<block*> segments;  // first block of each plain segment
  std::vector<std::unique_ptr<expandable_range>> ranges;
  std::vector<std::pair<event_handle, block*>> pending;
  std::vector<retirement> retiring;  // deferred page releases, oldest first
  std::uint64_t next_ticket = 0;
  std::vector<std::unique_ptr<thread_cache>> caches;
  allocator_stats st;
  std::deque<history_event> hist;
  std::function<void(const alloc_trace&)> trace;
  // Retired block records, reused with their container nodes: a warm split/merge cycle then
  // allocates nothing.
  std::vector<block*> spare;

  impl(allocator_backend& b, allocator_options opts);
  ~impl() {
    for (block* b : spare) delete b;
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  block* new_block() {
    if (spare.empty()) return new block;
    block* b = spare.back();
    spare.pop_back();
    return b;
  }

  /// A new block of `size` bytes at `ptr` on `stream`'s pool (small or large), unlinked.
  block* new_block(std::uintptr_t ptr, std::size_t size, stream_handle stream, bool small) {
    block* b = new_block();
    b->ptr = ptr;
    b->size = size;
    b->stream = stream;
    b->small = small;
    return b;
  }

  void retire(block* b) {
    b->prev = b->next = nullptr;
    b->allocated = b->in_free_set = false;
    b->mapped = true;
    b->pending_events = 0;
    b->segment_bytes = 0;
    b->range = nullptr;
    b->owner = nullptr;
    b->stream_uses.clear();
    spare.push_back(b);
  }

  free_set& pool_of(const block* b) { return b->small ? small_free : large_free; }
  unmapped_set& unmapped_of(const block* b) { return b->small ? small_unmapped : large_unmapped; }
  std::uint64_t& lookups_of(bool small) { return small ? small_lookups : large_lookups; }
  [[nodiscard]] bool gc_enabled() const {
    return o.garbage_collection_threshold > 0 && o.reserved_limit != SIZE_MAX;
  }

  /// Calls f on the counters of both pools and on those of the small or the large pool: every
  /// change of a counter goes through here, so that both = small + large at every moment.
  template <class F>
  void count(bool small, F&& f) {
    f(static_cast<pool_stats&>(st));
    f(small ? st.small_pool : st.large_pool);
  }

  void record(history_kind k, std::uintptr_t p, std::size_t n, stream_handle s) {
    if (o.history_capacity == 0) return;
    if (hist.size() == o.history_capacity) hist.pop_front();
    hist.push_back({k, host_clock_ns(), p, n, s});
  }

  void insert_free(block* b) {
    free_set& p = pool_of(b);
    if (!b->free_node.empty()) {
      b->free_node.value() = b;
      p.insert(std::move(b->free_node));
    } else {
      p.insert(b);
    }
    b->in_free_set = true;
    b->gc_count_base = lookups_of(b->small);
    if (b->is_split()) {
      count(b->small, [&](pool_stats& s) {
        s.inactive_split_bytes.add(static_cast<std::int64_t>(b->size));
        s.inactive_split_count.add(1);
      });
    }
  }

  void remove_free(block* b) {
    free_set& p = pool_of(b);
    b->free_node = p.extract(b);
    b->in_free_set = false;
    if (b->is_split()) {
      count(b->small, [&](pool_stats& s) {
        s.inactive_split_bytes.sub(static_cast<std::int64_t>(b->size));
        s.inactive_split_count.sub(1);
      });
    }
  }

  // caching_allocator.cpp
  inline block* find_free(stream_handle stream, std::size_t rounded, bool small);

  [[nodiscard]] bool should_split(const block* b, std::size_t rounded) const {
    const std::size_t remaining = b->size - rounded;
    if (b->small || b->range) return remaining >= kMinBlock;
    return rounded < o.max_split_size && remaining > kSmallRequest;
  }

  /// A block that just became free merges with its free neighbours at once (as PyTorch's
  /// free_block), so the cache always holds the largest blocks it can: deferring the merge lets
  /// later requests split fragments that a merged block would have served whole.
  void free_block(block* b) {
    count(b->small, [&](pool_stats& s) {
      s.active_bytes.sub(static_cast<std::int64_t>(b->size));
      s.active_count.sub(1);
    });
    merge_and_insert(b);
  }

  void merge_and_insert(block* b) {
    if (b->prev && b->prev->in_free_set) {
      block* a = b->prev;
      remove_free(a);
      absorb(a, b);
      b = a;
    }
    if (b->next && b->next->in_free_set) {
      block* n = b->next;
      remove_free(n);
      absorb(b, n);
    }
    insert_free(b);
  }

  /// Cuts b at `at` bytes: a new block for the rest, linked after b, of b's stream, pool and
  /// range (mapped; outside every set). b keeps the first `at` bytes.
  block* split_off(block* b, std::size_t at) {
    block* rest = new_block(b->ptr + at, b->size - at, b->stream, b->small);
    rest->range = b->range;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = at;
    return rest;
  }

  /// a takes in its right neighbour n (both outside every set). n is retired.
  void absorb(block* a, block* n) {
    a->size += n->size;
    a->next = n->next;
    if (n->next) n->next->prev = a;
    retire(n);
  }

  void complete_free(block* b) {
    record(history_kind::free_completed, b->ptr, b->size, b->stream);
    free_block(b);
  }

  /// Runs a backend call, counting the host time it took (allocator_stats::device_call_ns).
  template <class F>
  decltype(auto) timed(F&& f) {
    struct clock_guard {
      std::int64_t& total;
      std::uint64_t t0 = host_clock_ns();
      ~clock_guard() { total += static_cast<std::int64_t>(host_clock_ns() - t0); }
    } g{st.device_call_ns};
    return f();
  }

  void synchronize_device() {
    timed([&] { backend.synchronize(); });
    ++st.device_syncs;
  }

  void process_events() {
    if (!retiring.empty()) poll_retirements();
    if (pending.empty()) return;
    poll_completed(
        pending, [&](const auto& entry) { return backend.event_done(entry.first); },
        [&](const auto& entry) {
          backend.release_event(entry.first);
          if (--entry.second->pending_events == 0) complete_free(entry.second);
        });
  }

  // ---- thread caches (all under the allocator's lock) ----------------------------------------

  // The calling thread's cache (caching_allocator.cpp, where the per-thread slots live).
  inline thread_cache* my_cache() const noexcept;
  inline thread_cache* my_cache_or_new();
  [[nodiscard]] thread_cache* calling_thread_cache() const noexcept;  // my_cache(), not inlined

  /// Holds every other live thread's cache claimed for its scope (one heavy fence), so the
  /// lock holder may read and change them. Scopes nest; only the outermost one claims.
  class cache_claim {
   public:
    explicit cache_claim(const impl& m);
    ~cache_claim();
    cache_claim(const cache_claim&) = delete;
    cache_claim& operator=(const cache_claim&) = delete;

   private:
    const impl& m_;
  };
  mutable int claim_depth = 0;
  // allocator_stats::cache_claims and cache_claim_ns (written under the lock, by claims).
  mutable std::int64_t claims = 0, claim_ns = 0;

  void fold(thread_cache& c) {
    // The fast path hands out and takes back blocks with no pending events: active moves with
    // allocated. Its blocks are all of the small pool (deallocate_slow caches no other).
    count(true, [&](pool_stats& s) {
      c.bytes.apply_to(s.allocated_bytes);
      c.bytes.apply_to(s.active_bytes);
      c.requested.apply_to(s.requested_bytes);
      c.count.apply_to(s.allocation_count);
      c.count.apply_to(s.active_count);
    });
    c.bytes = c.requested = c.count = {};
  }

  /// Folds the counters of thread cache c (under its lock); with `empty`, also returns its
  /// cached blocks to the shared cache (merged) and moves its epoch on, so blocks it handed out
  /// before come back through the shared cache.
  void sweep(thread_cache& c, bool empty) {
    fold(c);
    if (!empty) return;
    for (std::size_t k = 0; k < c.n_cached; ++k) {
      block* b = c.cached[k];
      b->owner = nullptr;
      merge_and_insert(b);
    }
    c.set_cached(0);
    ++c.epoch;
  }

  /// What a sweep of every thread cache does besides folding their counters.
  enum class sweep_mode {
    fold,   // counters only
    empty,  // cached blocks back to the shared cache (merged)
    adopt,  // that, and blocks handed out by the fast path moved to the shared map, since the
            // caller reads their fields, which the fast path writes under the cache's lock
  };

  // caching_allocator_thread_cache.cpp
  void sweep_caches(sweep_mode mode);
  void sweep_caches(sweep_mode mode, bool live_too);  // the caller has claimed them (if live_too)
  void reclaim_orphans();
  void adopt_handed_out(thread_cache& c);
  block* adopt_from_caches(std::uintptr_t p);
  [[nodiscard]] bool cacheable(const block* b);

  block* find_live(std::uintptr_t p) {
    block* b = active.find(p);
    return b ? b : adopt_from_caches(p);
  }

  /// Whether some thread cache seems to hold free blocks (read without claiming the caches: a
  /// block cached at this moment by another thread may be missed, as if cached a moment later).
  [[nodiscard]] bool caches_hold_blocks() const {
    for (const auto& c : caches)
      if (c->cached_hint.load(std::memory_order_relaxed)) return true;
    return false;
  }

  // ---- segments and expandable ranges -----------------------------------------------------

  /// Counts `bytes` more reserved in the small or the large pool, and the highest mark reserved
  /// has reached.
  void add_reserved(std::size_t bytes, bool small) {
    count(small, [&](pool_stats& s) { s.reserved_bytes.add(static_cast<std::int64_t>(bytes)); });
    reserved_high = std::max(reserved_high, static_cast<std::size_t>(st.reserved_bytes.current));
  }

  [[nodiscard]] bool within_limit(std::size_t bytes) const {
    return o.reserved_limit == SIZE_MAX ||
           static_cast<std::size_t>(st.reserved_bytes.current) + bytes <= o.reserved_limit;
  }

  // caching_allocator.cpp
  inline block* new_segment(std::size_t rounded, bool small, stream_handle stream);

  // caching_allocator_expandable.cpp
  inline expandable_range* new_range(stream_handle stream, bool small);
  inline void map_block(block* u, std::size_t bytes);
  inline void release_free_pages(bool small, stream_handle stream);

  /// Calls f(range, page) for each page with memory wholly inside a free block of `r`.
  template <class F>
  void for_each_free_page(expandable_range& r, F&& f) {
    for (block* b = r.head; b; b = b->next) {
      if (!b->in_free_set) continue;
      const std::size_t first = r.page_of(b->ptr + r.page - 1);
      const std::size_t last = r.page_of(b->ptr + b->size);  // one past
      for (std::size_t i = first; i < last; ++i)
        if (r.is_resident(i)) f(r, i);
    }
  }

  template <class F>
  void for_each_free_page(bool small, stream_handle stream, F&& f) {
    for (const auto& rg : ranges)
      if (rg->small == small && rg->stream == stream) for_each_free_page(*rg, f);
  }

  void poll_retirements(bool all = false);
  inline void unmap_pages(expandable_range& r, std::size_t first, std::size_t last);

  /// Calls f(ptr, bytes, resident) for the parts of the range block b with and without memory,
  /// in address order.
  template <class F>
  void for_each_part(const block* b, F&& f) const {
    const expandable_range& r = *b->range;
    const std::uintptr_t end = b->ptr + b->size;
    for (std::uintptr_t p = b->ptr; p < end;) {
      const bool resident = r.is_resident(r.page_of(p));
      std::uintptr_t q = p;
      while (q < end && r.is_resident(r.page_of(q)) == resident)
        q = std::min(end, r.base + (r.page_of(q) + 1) * r.page);
      f(p, q - p, resident);
      p = q;
    }
  }

  [[nodiscard]] std::size_t resident_size(const block* b) const;
  inline void release_pages(expandable_range& r, std::uintptr_t from, std::uintptr_t to);
  bool make_resident(block* b, bool& mapped_any);
  block* expandable_block(std::size_t rounded, bool small, stream_handle stream);
  void unmap_block(block* b);

  // ---- giving memory back (caching_allocator_release.cpp) ------------------------------------

  inline void release_segment(block* h);
  void garbage_collect();
  empty_cache_report release_cached();

  // ---- introspection (caching_allocator_introspect.cpp) --------------------------------------

  inline void fill_free_stats(allocator_stats& s) const;
  [[nodiscard]] inline std::string oom_hint(const allocator_stats& s) const;
  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t rounded, stream_handle stream);

  // ---- the shared alloc/free paths (caching_allocator.cpp) -----------------------------------

  inline block* from_backend(std::size_t rounded, bool small, stream_handle stream);
  inline void begin_shared_operation();
  inline block* place(std::size_t rounded, bool small, stream_handle stream, alloc_source& source);
  inline void* allocate_slow(std::size_t bytes, stream_handle stream);
  inline void deallocate_slow(std::uintptr_t p);
};

}  // namespace gpu_basics

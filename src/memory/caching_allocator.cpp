#include "gpu_basics/memory/caching_allocator.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <deque>
#include <set>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/event_poll.hpp"

namespace gpu_basics {

namespace {
constexpr std::size_t kMinBlock = 512;           // rounding unit and smallest block
constexpr std::size_t kSmallRequest = 1 << 20;   // requests up to 1 MiB use the small pool
constexpr std::size_t kSmallSegment = 2 << 20;   // small pool segments
constexpr std::size_t kLargeSegment = 20 << 20;  // segments for 1-10 MiB requests
constexpr std::size_t kMediumLimit = 10 << 20;
constexpr std::size_t kRoundLarge = 2 << 20;   // large requests round to 2 MiB segments
constexpr std::size_t kLargeSlack = 20 << 20;  // oversize blocks may exceed a request by this

std::string mib(std::size_t b) {
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
}
}  // namespace

std::size_t round_request(std::size_t bytes) noexcept {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}
allocator_options parse_allocator_conf(std::string_view conf, allocator_options base) {
  // gpu-basics' own keys (page_release) are taken out here; PyTorch's go to the policy parser.
  std::string pytorch_keys;
  bool first = true;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= conf.size(); ++i) {
    if (i < conf.size() && conf[i] == '[') ++depth;
    if (i < conf.size() && conf[i] == ']') --depth;
    if (i < conf.size() && (conf[i] != ',' || depth != 0)) continue;
    std::string_view item = conf.substr(start, i - start);
    start = i + 1;
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    if (item.starts_with("page_release:")) {
      std::string_view v = item.substr(std::string_view("page_release:").size());
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      try {
        base.release_pages = parse_page_release(v);
      } catch (const logic_error&) {
        throw logic_error(fmt::format(
            "allocator conf: page_release: expected deferred, eager or keep, got '{}'", v));
      }
      continue;
    }
    if (!first) pytorch_keys += ',';
    pytorch_keys += item;
    first = false;
  }
  static_cast<allocator_policy&>(base) = parse_allocator_policy(pytorch_keys, base);
  return base;
}

std::string to_conf_string(const allocator_options& o) {
  std::string s = to_conf_string(static_cast<const allocator_policy&>(o));
  if (o.release_pages != page_release::keep)
    s += fmt::format("{}page_release:{}", s.empty() ? "" : ",", to_string(o.release_pages));
  return s;
}

std::size_t round_request(std::size_t bytes, const allocator_options& o) noexcept {
  if (bytes < kMinBlock) return kMinBlock;
  const std::size_t log2 = static_cast<std::size_t>(std::bit_width(bytes) - 1);
  const std::size_t index = std::min(log2 > 20 ? log2 - 20 : 0, kRoundupIntervals - 1);
  const std::size_t divisions = o.roundup_power2_divisions[index];
  if (divisions <= 1 || bytes <= kMinBlock * divisions) return round_request(bytes);
  // PyTorch's roundup_power2_next_division: equal steps between two powers of two.
  if (std::has_single_bit(bytes)) return bytes;
  const std::size_t floor = std::bit_floor(bytes);
  const std::size_t step = floor >> static_cast<unsigned>(std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  const std::size_t down = bytes & ~(step - 1);
  return down == bytes ? bytes : down + step;
}

bool is_small_request(std::size_t rounded) noexcept {
  return rounded <= kSmallRequest;
}
std::size_t segment_size_for(std::size_t rounded) noexcept {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMediumLimit) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string_view to_string(alloc_source s) noexcept {
  switch (s) {
    case alloc_source::cache_hit:
      return "hit";
    case alloc_source::split:
      return "split";
    case alloc_source::new_segment:
      return "new segment";
    case alloc_source::after_retry:
      return "new segment after freeing the cache";
  }
  return "?";
}

std::string_view to_string(history_kind k) noexcept {
  switch (k) {
    case history_kind::alloc:
      return "alloc";
    case history_kind::free:
      return "free";
    case history_kind::segment_alloc:
      return "segment_alloc";
    case history_kind::segment_free:
      return "segment_free";
    case history_kind::oom:
      return "oom";
    case history_kind::free_completed:
      return "free_completed";
    case history_kind::segment_map:
      return "segment_map";
    case history_kind::segment_unmap:
      return "segment_unmap";
  }
  return "?";
}

std::string_view to_string(page_release p) noexcept {
  switch (p) {
    case page_release::deferred:
      return "deferred";
    case page_release::eager:
      return "eager";
    case page_release::keep:
      return "keep";
  }
  return "?";
}

page_release parse_page_release(std::string_view name) {
  for (page_release p : {page_release::deferred, page_release::eager, page_release::keep})
    if (name == to_string(p)) return p;
  throw logic_error(
      fmt::format("page release policy '{}': expected deferred, eager or keep", name));
}

namespace {

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

bool block_less::operator()(const block* a, const block* b) const noexcept {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

bool block_address_less::operator()(const block* a, const block* b) const noexcept {
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

/// Live allocations by address: open addressing with linear probing and backward-shift
/// deletion over a power-of-two table (no per-insert allocation, no modulo by a prime).
class pointer_map {
 public:
  pointer_map() : slots_(1024) {}
  [[nodiscard]] block* find(std::uintptr_t key) const noexcept {
    for (std::size_t i = index(key);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }
  void insert(std::uintptr_t key, block* value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    place(key, value);
    ++size_;
  }
  block* erase(std::uintptr_t key) noexcept {
    std::size_t i = index(key);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return nullptr;
    }
    block* v = slots_[i].value;
    // Shift later entries of the probe run back so lookups never meet a hole early.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].key == 0) break;
      const std::size_t home = index(slots_[j].key);
      if (((j - home) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return v;
  }

 private:
  struct slot {
    std::uintptr_t key = 0;
    block* value = nullptr;
  };
  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  [[nodiscard]] std::size_t index(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }
  void place(std::uintptr_t key, block* value) noexcept {
    std::size_t i = index(key);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = {key, value};
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const slot& s : old)
      if (s.key) place(s.key, s.value);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

/// Tells the core this thread is spin-waiting: x86 `pause`, AArch64 `yield` (both let a sibling
/// hardware thread run and save power); nothing on other targets.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/// A test-and-test-and-set lock: the allocator's critical sections are a few dozen
/// nanoseconds, shorter than a futex round trip, so waiters spin briefly and then yield.
class spin_lock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
          spins = 0;
        } else {
          cpu_relax();
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
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
/// there (`out`): both without the allocator's lock. Its own lock is taken by the owning thread
/// on every fast operation (uncontended: one atomic exchange, on a line no other thread writes)
/// and by the allocator when it empties the cache or looks for a pointer handed out by it.
/// `epoch` moves whenever the shared cache may have changed under the blocks handed out (the
/// owner's own shared operations, and sweeps of this cache by others): such a block then goes
/// back through the shared cache, merged as plain merge-on-free would merge it.
constexpr std::size_t kMaxThreadCache = 64;

/// Aligned to two cache lines, so that threads' caches never share one (false sharing would
/// make every fast operation of one thread a cache miss for its neighbour).
struct alignas(128) thread_cache {
  explicit thread_cache(std::size_t blocks) : capacity(blocks) {}
  spin_lock lock;
  std::size_t capacity;
  std::size_t n_cached = 0, n_out = 0;
  std::uint64_t epoch = 0;
  std::array<block*, kMaxThreadCache> cached{};  // free blocks, not in any free set
  std::array<block*, kMaxThreadCache> out{};     // allocated blocks handed out by the fast path
  stat_delta bytes, requested, count;
  std::atomic<bool> orphaned{false};  // its thread has ended (or forgot it): the allocator frees it
  std::atomic<std::size_t>* orphans = nullptr;  // the allocator's count of orphaned caches
};

// Which thread cache the calling thread uses for which allocator: a few slots per thread,
// keyed by an allocator id that is never reused. A registry of live ids lets a thread that ends
// tell the allocators it used (and only live ones) that its caches are orphaned.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<std::uint64_t>& live_allocators() {
  static std::unordered_set<std::uint64_t> ids;
  return ids;
}
std::atomic<std::uint64_t> next_allocator_id{1};

/// Set when this thread's slots are destroyed (thread exit; for the main thread, before static
/// destructors, which may still free memory): from then on the thread uses no cache. Constant-
/// initialized and without a destructor, so it outlives every other thread_local.
thread_local bool tls_dead = false;

struct thread_slots {
  static constexpr std::size_t kSlots = 4;
  std::uint64_t ids[kSlots] = {};
  thread_cache* caches[kSlots] = {};
  std::size_t next = 0;
  /// Marks a cache orphaned if its allocator is still alive.
  static void orphan(std::uint64_t id, thread_cache* c) noexcept {
    std::lock_guard lock(registry_mutex());
    if (!live_allocators().count(id)) return;
    // Counted before the flag is set: once it is, a sweep may delete the cache at once.
    c->orphans->fetch_add(1, std::memory_order_release);
    c->orphaned.store(true, std::memory_order_release);
  }
  ~thread_slots() {
    tls_dead = true;
    for (std::size_t i = 0; i < kSlots; ++i) {
      if (ids[i]) orphan(ids[i], caches[i]);
      ids[i] = 0;
      caches[i] = nullptr;
    }
  }
  [[nodiscard]] thread_cache* find(std::uint64_t id) const noexcept {
    if (tls_dead) return nullptr;
    for (std::size_t i = 0; i < kSlots; ++i)
      if (ids[i] == id) return caches[i];
    return nullptr;
  }
  void put(std::uint64_t id, thread_cache* c) noexcept {
    const std::size_t i = next++ % kSlots;
    if (ids[i]) orphan(ids[i], caches[i]);
    ids[i] = id;
    caches[i] = c;
  }
};
thread_local thread_slots tls_caches;

}  // namespace

struct caching_allocator::impl {
  allocator_backend& backend;
  allocator_options o;
  const std::uint64_t id = next_allocator_id.fetch_add(1);
  const bool vmm;             // expandable segments in use
  const bool fast_ok;         // thread caches in use
  const bool plain_rounding;  // no roundup_power2_divisions: 512-byte steps
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

  impl(allocator_backend& b, allocator_options opts)
      : backend(b),
        o(opts),
        vmm(opts.expandable_segments && b.supports_virtual_memory()),
        fast_ok(opts.thread_cache_blocks > 0 && opts.history_capacity == 0),
        plain_rounding(std::all_of(opts.roundup_power2_divisions.begin(),
                                   opts.roundup_power2_divisions.end(),
                                   [](std::size_t d) { return d <= 1; })) {
    o.thread_cache_blocks = std::min(o.thread_cache_blocks, kMaxThreadCache);
    std::lock_guard lock(registry_mutex());
    live_allocators().insert(id);
  }
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
      st.inactive_split_bytes.add(static_cast<std::int64_t>(b->size));
      st.inactive_split_count.add(1);
    }
  }

  void remove_free(block* b) {
    free_set& p = pool_of(b);
    b->free_node = p.extract(b);
    b->in_free_set = false;
    if (b->is_split()) {
      st.inactive_split_bytes.sub(static_cast<std::int64_t>(b->size));
      st.inactive_split_count.sub(1);
    }
  }

  /// Best fit on `stream` under PyTorch's rules for oversize blocks (max_split_size). With
  /// expandable ranges, a free block at the mapped end of a range counts as large as it could
  /// grow, as PyTorch's get_free_block does.
  block* find_free(stream_handle stream, std::size_t rounded, bool small) {
    free_set& p = small ? small_free : large_free;
    if (gc_enabled()) ++lookups_of(small);
    block key;
    key.stream = stream;
    key.size = rounded;
    auto it = p.lower_bound(&key);
    if (it == p.end() || (*it)->stream != stream) return nullptr;
    if ((*it)->range) {
      const auto growable = [](const block* b) {
        return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
      };
      for (auto next = std::next(it); (*it)->range && next != p.end() &&
                                      (*next)->stream == stream && growable(*next) < growable(*it);
           ++next)
        it = next;
    }
    block* b = *it;
    if (rounded < o.max_split_size && b->size >= o.max_split_size) return nullptr;
    if (rounded >= o.max_split_size && b->size >= rounded + kLargeSlack) return nullptr;
    return b;
  }

  [[nodiscard]] bool should_split(const block* b, std::size_t rounded) const {
    const std::size_t remaining = b->size - rounded;
    if (b->small || b->range) return remaining >= kMinBlock;
    return rounded < o.max_split_size && remaining > kSmallRequest;
  }

  /// A block that just became free merges with its free neighbours at once (as PyTorch's
  /// free_block), so the cache always holds the largest blocks it can: deferring the merge lets
  /// later requests split fragments that a merged block would have served whole.
  void free_block(block* b) {
    st.active_bytes.sub(static_cast<std::int64_t>(b->size));
    st.active_count.sub(1);
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
    block* rest = new_block();
    rest->ptr = b->ptr + at;
    rest->size = b->size - at;
    rest->stream = b->stream;
    rest->small = b->small;
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

  thread_cache* my_cache() const noexcept { return fast_ok ? tls_caches.find(id) : nullptr; }

  thread_cache* my_cache_or_new() {
    if (!fast_ok || tls_dead) return nullptr;
    if (thread_cache* c = tls_caches.find(id)) return c;
    caches.push_back(std::make_unique<thread_cache>(o.thread_cache_blocks));
    caches.back()->orphans = &orphans;
    tls_caches.put(id, caches.back().get());
    return caches.back().get();
  }

  void fold(thread_cache& c) {
    // The fast path hands out and takes back blocks with no pending events: active moves with
    // allocated.
    c.bytes.apply_to(st.allocated_bytes);
    c.bytes.apply_to(st.active_bytes);
    c.requested.apply_to(st.requested_bytes);
    c.count.apply_to(st.allocation_count);
    c.count.apply_to(st.active_count);
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
    c.n_cached = 0;
    ++c.epoch;
  }

  /// What a sweep of every thread cache does besides folding their counters.
  enum class sweep_mode {
    fold,   // counters only
    empty,  // cached blocks back to the shared cache (merged)
    adopt,  // that, and blocks handed out by the fast path moved to the shared map, since the
            // caller reads their fields, which the fast path writes under the cache's lock
  };

  /// Sweeps every thread cache; orphaned caches are emptied and adopted whatever the mode, and
  /// deleted.
  void sweep_caches(sweep_mode mode) {
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
  block* adopt_from_caches(std::uintptr_t p) {
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

  block* find_live(std::uintptr_t p) {
    block* b = active.find(p);
    return b ? b : adopt_from_caches(p);
  }

  /// Whether the freed block b may wait in a thread cache for the next request of its size
  /// without changing what merge-on-free would do. Merge-on-free would merge b with a free right
  /// neighbour into M (a free left one would move the block: then no), and the next request of
  /// b's size would split M at b's address if find_free() would pick M: walking the free blocks
  /// of the stream from b's size up in find_free()'s order, with M in place of the neighbour.
  /// Then handing b out again, with the neighbour left as it is, is the same placement.
  [[nodiscard]] bool cacheable(const block* b) {
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

  [[nodiscard]] bool caches_hold_blocks() const {
    for (const auto& c : caches) {
      std::lock_guard lock(c->lock);
      if (c->n_cached) return true;
    }
    return false;
  }

  // ---- segments and expandable ranges -----------------------------------------------------

  /// Counts `bytes` more reserved, and the highest mark reserved has reached.
  void add_reserved(std::size_t bytes) {
    st.reserved_bytes.add(static_cast<std::int64_t>(bytes));
    reserved_high = std::max(reserved_high, static_cast<std::size_t>(st.reserved_bytes.current));
  }

  [[nodiscard]] bool within_limit(std::size_t bytes) const {
    return o.reserved_limit == SIZE_MAX ||
           static_cast<std::size_t>(st.reserved_bytes.current) + bytes <= o.reserved_limit;
  }

  /// A new plain segment for `rounded`, outside every set; nullptr when the backend has none.
  block* new_segment(std::size_t rounded, bool small, stream_handle stream) {
    const std::size_t seg = small ? kSmallSegment : segment_size_for(rounded);
    if (!within_limit(seg)) return nullptr;
    const auto p = reinterpret_cast<std::uintptr_t>(timed([&] { return backend.allocate(seg); }));
    if (!p) return nullptr;
    block* b = new_block();
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    b->segment_bytes = seg;
    segments.insert(b);
    add_reserved(seg);
    st.segment_count.add(1);
    ++st.device_allocations;
    record(history_kind::segment_alloc, p, seg, stream);
    return b;
  }

  expandable_range* new_range(stream_handle stream, bool small) {
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
    block* b = new_block();
    b->ptr = base;
    b->size = bytes;
    b->stream = stream;
    b->small = small;
    b->mapped = false;
    b->range = r.get();
    r->head = b;
    unmapped_of(b).insert(b);
    ranges.push_back(std::move(r));
    st.segment_count.add(1);
    return ranges.back().get();
  }

  /// Maps the first `bytes` (rounded up to pages) of the unmapped block `u` into the range's
  /// blocks: the mapped part becomes a free block merged with free neighbours. Its pages get
  /// memory only when a block in use needs them (make_resident).
  void map_block(block* u, std::size_t bytes) {
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
  void release_free_pages(bool small, stream_handle stream) {
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

  /// Unmaps the pages of retirements whose events are done (all of them with `all`, after the
  /// caller synchronised the device), except pages a block took back since.
  void poll_retirements(bool all = false) {
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
  void unmap_pages(expandable_range& r, std::size_t first, std::size_t last) {
    timed([&] {
      for (std::size_t i = first; i < last; ++i) backend.unmap(r.base + i * r.page, r.page);
    });
    for (std::size_t i = first; i < last; ++i) r.pages[i] = page_state::none;
    const std::size_t n = (last - first) * r.page;
    r.mapped_bytes -= n;
    st.reserved_bytes.sub(static_cast<std::int64_t>(n));
    ++st.device_frees;
    record(history_kind::segment_unmap, r.base + first * r.page, n, r.stream);
  }

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

  /// Bytes of block b that have memory behind them.
  [[nodiscard]] std::size_t resident_size(const block* b) const {
    if (!b->range) return b->size;
    std::size_t n = 0;
    for_each_part(b, [&](std::uintptr_t, std::size_t bytes, bool resident) {
      if (resident) n += bytes;
    });
    return n;
  }

  /// Unmaps the pages with memory wholly inside [from, to) at once: the caller has made sure
  /// the GPU is done with them (a device synchronisation).
  void release_pages(expandable_range& r, std::uintptr_t from, std::uintptr_t to) {
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
  bool make_resident(block* b, bool& mapped_any) {
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
    add_reserved(need);
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
  block* expandable_block(std::size_t rounded, bool small, stream_handle stream) {
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
  void unmap_block(block* b) {
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

  void release_segment(block* h) {
    remove_free(h);
    timed([&] { backend.deallocate(reinterpret_cast<void*>(h->ptr), h->segment_bytes); });
    st.reserved_bytes.sub(static_cast<std::int64_t>(h->segment_bytes));
    st.segment_count.sub(1);
    ++st.device_frees;
    record(history_kind::segment_free, h->ptr, h->segment_bytes, h->stream);
    segments.erase(h);
    retire(h);
  }

  /// PyTorch's garbage_collect_cached_blocks: past the threshold of the reserved limit, return
  /// whole free large segments that have waited longest (older than the average first).
  void garbage_collect() {
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

  empty_cache_report release_cached() {
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

  void fill_free_stats(allocator_stats& s) const {
    std::size_t total = 0, largest = 0;
    for (const free_set* p : {&small_free, &large_free})
      for (const block* b : *p) {  // free bytes with memory behind them
        const std::size_t n = resident_size(b);
        total += n;
        largest = std::max(largest, n);
      }
    for (const auto& c : caches) {
      std::lock_guard lock(c->lock);
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
  [[nodiscard]] std::string oom_hint(const allocator_stats& s) const {
    if (s.cached_free_bytes == 0 || vmm) return "";
    return ". If reserved but free memory is large, try expandable_segments:True to avoid "
           "fragmentation";
  }

  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t rounded, stream_handle stream) {
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
                    mib(static_cast<std::size_t>(s.reserved_bytes.current)),
                    mib(s.cached_free_bytes), mib(s.largest_free_block), 100.0 * s.fragmentation,
                    limit, backend.name(), mib(dev_free), mib(dev_total)) +
            oom_hint(s),
        bytes);
  }

  /// A block for `rounded` from the backend: a mapped part of an expandable range, or a new
  /// segment. Free (in its free set) for a range, outside every set for a segment.
  block* from_backend(std::size_t rounded, bool small, stream_handle stream) {
    if (vmm) return expandable_block(rounded, small, stream);
    return new_segment(rounded, small, stream);
  }

  /// What every operation on the shared cache starts with: the calling thread's cache emptied
  /// into the shared cache (its counters folded, its epoch moved on), and caches of threads
  /// that ended reclaimed. With one thread, every decision below then sees the cache exactly as
  /// plain merge-on-free would have it. Other threads' caches are left alone (sweeping them
  /// on every miss would make each thread's misses everybody's), except before the allocator
  /// asks the backend for memory (allocate_slow).
  void begin_shared_operation() {
    if (thread_cache* c = my_cache()) {
      std::lock_guard lock(c->lock);
      sweep(*c, true);
    }
    if (orphans.load(std::memory_order_acquire) != 0) sweep_caches(sweep_mode::fold);
  }

  /// A block of `rounded` bytes taken out of the cache (split as needed) or from the backend,
  /// with memory behind every page it touches; nullptr when the device (or the reserved limit)
  /// has no room left.
  block* place(std::size_t rounded, bool small, stream_handle stream, alloc_source& source) {
    source = alloc_source::cache_hit;
    block* b = find_free(stream, rounded, small);
    if (!b && caches_hold_blocks()) {  // other threads' cached blocks, merged, may serve it
      sweep_caches(sweep_mode::empty);
      b = find_free(stream, rounded, small);
    }
    if (!b) {
      if (gc_enabled()) garbage_collect();
      source = alloc_source::new_segment;
      b = from_backend(rounded, small, stream);
      if (!b) return nullptr;
    }
    if (b->in_free_set) remove_free(b);
    if (should_split(b, rounded)) {
      insert_free(split_off(b, rounded));
      if (source == alloc_source::cache_hit) source = alloc_source::split;
    }
    bool mapped = false, resident = true;
    try {
      resident = !b->range || make_resident(b, mapped);
    } catch (...) {  // a backend failure other than out of memory: the block goes back
      merge_and_insert(b);
      throw;
    }
    if (!resident) {
      merge_and_insert(b);
      return nullptr;
    }
    if (mapped) source = alloc_source::new_segment;
    return b;
  }

  void* allocate_slow(std::size_t bytes, stream_handle stream) {
    begin_shared_operation();
    process_events();
    const std::size_t rounded = round_request(bytes, o);
    const bool small = is_small_request(rounded);
    alloc_source source{};
    block* b = place(rounded, small, stream, source);
    if (!b) {
      // Free what the cache holds (after letting pending stream work finish) and try again.
      synchronize_device();
      process_events();
      (void)release_cached();
      b = place(rounded, small, stream, source);
      if (!b) throw_oom(bytes, rounded, stream);
      ++st.alloc_retries;
      source = alloc_source::after_retry;
    }
    b->allocated = true;
    b->requested = bytes;
    active.insert(b->ptr, b);
    st.allocated_bytes.add(static_cast<std::int64_t>(b->size));
    st.requested_bytes.add(static_cast<std::int64_t>(bytes));
    st.active_bytes.add(static_cast<std::int64_t>(b->size));
    st.allocation_count.add(1);
    st.active_count.add(1);
    record(history_kind::alloc, b->ptr, b->size, stream);
    if (trace)
      trace({bytes, rounded, small, stream, source, st.allocated_bytes.current,
             st.reserved_bytes.current});
    return reinterpret_cast<void*>(b->ptr);
  }

  void deallocate_slow(std::uintptr_t p) {
    begin_shared_operation();
    block* b = find_live(p);
    if (!b)
      throw logic_error(
          fmt::format("deallocate({:#x}): not a live allocation of this allocator", p));
    active.erase(p);
    st.allocated_bytes.sub(static_cast<std::int64_t>(b->size));
    st.requested_bytes.sub(static_cast<std::int64_t>(b->requested));
    st.allocation_count.sub(1);
    b->allocated = false;
    record(history_kind::free, b->ptr, b->size, b->stream);
    if (!b->stream_uses.empty()) {
      for (stream_handle s : b->stream_uses) {
        pending.emplace_back(backend.record_event(s), b);
        ++b->pending_events;
      }
      b->stream_uses.clear();
      return;
    }
    record(history_kind::free_completed, b->ptr, b->size, b->stream);
    // A small block goes to the freeing thread's cache, for its next request of the size, when
    // that changes nothing merge-on-free would do (cacheable()).
    if (b->small && !traced.load(std::memory_order_relaxed) && cacheable(b)) {
      if (thread_cache* c = my_cache_or_new()) {
        std::lock_guard lock(c->lock);
        if (c->n_cached + c->n_out < c->capacity) {
          st.active_bytes.sub(static_cast<std::int64_t>(b->size));
          st.active_count.sub(1);
          b->owner = c;
          c->cached[c->n_cached++] = b;
          return;
        }
      }
    }
    free_block(b);
  }
};

namespace {
/// The backend, checked before anything dereferences it.
std::shared_ptr<allocator_backend> checked(std::shared_ptr<allocator_backend> backend) {
  GPU_BASICS_EXPECTS(backend != nullptr, "caching_allocator needs a backend");
  return backend;
}
}  // namespace

caching_allocator::caching_allocator(std::shared_ptr<allocator_backend> backend,
                                     allocator_options o)
    : backend_(checked(std::move(backend))), o_(o), impl_(std::make_unique<impl>(*backend_, o)) {}

caching_allocator::~caching_allocator() {
  auto& m = *impl_;
  {
    std::lock_guard lock(registry_mutex());
    live_allocators().erase(m.id);  // threads that end from now on leave its caches alone
  }
  std::lock_guard lock(m.mutex);
  try {
    m.backend.synchronize();
  } catch (...) {
  }
  try {  // at process exit CUDA may be gone already: nothing here may escape a destructor
    m.process_events();
    (void)m.release_cached();
  } catch (...) {
  }
  for (auto& [e, b] : m.pending) m.backend.release_event(e);
  for (auto& t : m.retiring) m.backend.release_event(t.event);
  // Still in use: the memory stays with its users.
  const auto delete_chain = [](block* h) {
    for (block* b = h; b;) {
      block* n = b->next;
      delete b;
      b = n;
    }
  };
  for (block* h : m.segments) delete_chain(h);
  for (const auto& r : m.ranges) {
    const bool empty = r->mapped_bytes == 0;
    delete_chain(r->head);
    if (empty) m.backend.release_address(r->base, r->bytes);
  }
}

void* caching_allocator::allocate(std::size_t bytes, stream_handle stream) {
  auto& m = *impl_;
  if (bytes > SIZE_MAX / 4)  // rounding would wrap around: no device has that much anyway
    throw out_of_memory(fmt::format("out of memory: tried to allocate {} bytes, more than any "
                                    "device can hold",
                                    bytes),
                        bytes);
  if (m.fast_ok && !m.traced.load(std::memory_order_relaxed)) {
    if (thread_cache* c = m.my_cache()) {
      const std::size_t rounded =
          m.plain_rounding ? round_request(bytes) : round_request(bytes, m.o);
      if (is_small_request(rounded)) {
        std::lock_guard lock(c->lock);
        for (std::size_t k = 0; k < c->n_cached; ++k) {
          block* b = c->cached[k];
          if (b->stream != stream || b->size < rounded || b->size - rounded >= kMinBlock) continue;
          c->cached[k] = c->cached[--c->n_cached];
          c->out[c->n_out++] = b;
          b->allocated = true;
          b->epoch = c->epoch;
          b->requested = bytes;
          c->bytes.add(static_cast<std::int64_t>(b->size));
          c->requested.add(static_cast<std::int64_t>(bytes));
          c->count.add(1);
          return reinterpret_cast<void*>(b->ptr);
        }
      }
    }
  }
  std::lock_guard lock(m.mutex);
  return m.allocate_slow(bytes, stream);
}

void caching_allocator::deallocate(void* p) {
  if (!p) return;
  auto& m = *impl_;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  thread_cache* c = m.traced.load(std::memory_order_relaxed) ? nullptr : m.my_cache();
  if (c) {
    std::lock_guard lock(c->lock);
    for (std::size_t k = 0; k < c->n_out; ++k) {
      block* b = c->out[k];
      if (b->ptr != addr) continue;
      if (!b->stream_uses.empty()) break;  // used on other streams: events, on the slow path
      if (b->epoch != c->epoch) break;     // the shared cache may have changed since
      c->out[k] = c->out[--c->n_out];
      c->cached[c->n_cached++] = b;
      b->allocated = false;
      c->bytes.sub(static_cast<std::int64_t>(b->size));
      c->requested.sub(static_cast<std::int64_t>(b->requested));
      c->count.sub(1);
      return;
    }
  }
  std::lock_guard lock(m.mutex);
  m.deallocate_slow(addr);
}

void caching_allocator::record_stream(void* p, stream_handle stream) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  block* b = m.find_live(reinterpret_cast<std::uintptr_t>(p));
  if (!b) throw logic_error(fmt::format("record_stream({}): not a live allocation", p));
  if (stream == b->stream) return;  // the owning stream orders its own reuse
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

std::size_t caching_allocator::block_size(void* p) const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const block* b = m.find_live(reinterpret_cast<std::uintptr_t>(p));
  if (!b) throw logic_error(fmt::format("block_size({}): not a live allocation", p));
  return b->size;
}

empty_cache_report caching_allocator::empty_cache() {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.process_events();
  return m.release_cached();
}

allocator_stats caching_allocator::stats() const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.sweep_caches(impl::sweep_mode::empty);  // report the cache merged, as it is after thread caches
                                            // are emptied
  allocator_stats s = m.st;
  m.fill_free_stats(s);
  return s;
}

void caching_allocator::reset_peak_stats() {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.sweep_caches(impl::sweep_mode::fold);
  for (memory_stat* s : {&m.st.allocated_bytes, &m.st.requested_bytes, &m.st.reserved_bytes,
                         &m.st.active_bytes, &m.st.inactive_split_bytes, &m.st.allocation_count,
                         &m.st.segment_count, &m.st.active_count, &m.st.inactive_split_count})
    s->peak = s->current;
}

void caching_allocator::set_history_capacity(std::size_t events) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.o.history_capacity = o_.history_capacity = events;
  while (m.hist.size() > events) m.hist.pop_front();
  m.traced.store(static_cast<bool>(m.trace) || events > 0);
  m.sweep_caches(impl::sweep_mode::empty);
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
        bv.state = "active_allocated";
        sv.allocated_size += b->size;
        sv.active_size += b->size;
        sv.requested_size += b->requested;
      } else if (b->pending_events > 0) {
        bv.state = "active_pending_free";
        sv.active_size += b->size;
      } else {
        bv.state = "inactive";
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

allocator_options caching_allocator::options() const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  return o_;
}

void caching_allocator::set_reserved_limit(std::size_t bytes) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.o.reserved_limit = bytes;
  o_.reserved_limit = bytes;
}

void caching_allocator::set_trace_callback(std::function<void(const alloc_trace&)> cb) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.traced.store(static_cast<bool>(cb) || m.o.history_capacity > 0);
  m.sweep_caches(impl::sweep_mode::empty);
  m.trace = std::move(cb);
}

void to_json(nlohmann::json& j, const memory_stat& s) {
  j = {{"current", s.current}, {"peak", s.peak}, {"allocated", s.allocated}, {"freed", s.freed}};
}

void to_json(nlohmann::json& j, const allocator_stats& s) {
  j = {{"allocated_bytes", s.allocated_bytes},
       {"requested_bytes", s.requested_bytes},
       {"reserved_bytes", s.reserved_bytes},
       {"active_bytes", s.active_bytes},
       {"inactive_split_bytes", s.inactive_split_bytes},
       {"allocation_count", s.allocation_count},
       {"segment_count", s.segment_count},
       {"active_count", s.active_count},
       {"inactive_split_count", s.inactive_split_count},
       {"device_allocations", s.device_allocations},
       {"device_frees", s.device_frees},
       {"alloc_retries", s.alloc_retries},
       {"ooms", s.ooms},
       {"device_syncs", s.device_syncs},
       {"device_call_ns", s.device_call_ns},
       {"pages_retired", s.pages_retired},
       {"pages_reclaimed", s.pages_reclaimed},
       {"cached_free_bytes", s.cached_free_bytes},
       {"largest_free_block_bytes", s.largest_free_block},
       {"fragmentation", s.fragmentation}};
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

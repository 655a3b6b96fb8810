#include "gpu_basics/memory/caching_allocator.hpp"

#include <algorithm>
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

namespace {

struct block;
struct block_less {
  bool operator()(const block* a, const block* b) const noexcept;
};
using free_set = std::set<block*, block_less>;

struct block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  stream_handle stream = 0;
  bool small = false;
  bool allocated = false;
  bool in_free_set = false;
  bool queued = false;  // listed in impl::unmerged
  int pending_events = 0;
  block* prev = nullptr;
  block* next = nullptr;
  std::size_t segment_bytes = 0;  // set on a segment's first block
  std::vector<stream_handle> stream_uses;
  // Container nodes kept while the block is outside the container, so the hot path reinserts
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

}  // namespace

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

struct caching_allocator::impl {
  allocator_backend& backend;
  allocator_options o;
  mutable spin_lock mutex;
  free_set small_free, large_free;
  pointer_map active;
  std::unordered_set<block*> segments;  // first block of each segment
  std::vector<std::pair<event_handle, block*>> pending;
  allocator_stats st;
  std::deque<history_event> hist;
  std::function<void(const alloc_trace&)> trace;
  // Retired block records, reused with their container nodes: a warm split/merge cycle then
  // allocates nothing.
  std::vector<block*> spare;
  std::vector<block*> unmerged;  // freed split blocks not yet merged with their neighbours

  block* new_block() {
    if (spare.empty()) return new block;
    block* b = spare.back();
    spare.pop_back();
    return b;
  }
  void retire(block* b) {
    b->prev = b->next = nullptr;
    b->allocated = b->in_free_set = b->queued = false;
    b->pending_events = 0;
    b->segment_bytes = 0;
    b->stream_uses.clear();
    spare.push_back(b);
  }
  ~impl() {
    for (block* b : spare) delete b;
  }

  impl(allocator_backend& b, allocator_options opts) : backend(b), o(opts) {}

  free_set& pool_of(const block* b) { return b->small ? small_free : large_free; }

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

  block* find_free(stream_handle stream, std::size_t rounded, bool small) {
    free_set& p = small ? small_free : large_free;
    block key;
    key.stream = stream;
    key.size = rounded;
    const auto it = p.lower_bound(&key);
    if (it == p.end() || (*it)->stream != stream) return nullptr;
    block* b = *it;
    if (rounded < o.max_split_size && b->size >= o.max_split_size) return nullptr;
    if (rounded >= o.max_split_size && b->size >= rounded + kLargeSlack) return nullptr;
    return b;
  }

  bool should_split(const block* b, std::size_t rounded) const {
    const std::size_t remaining = b->size - rounded;
    if (b->small) return remaining >= kMinBlock;
    return remaining > kSmallRequest && b->size < o.max_split_size;
  }

  /// A block that just became free goes back to the cache as it is. Merging with free
  /// neighbours is deferred to coalesce() (run before a miss turns into a new segment, and by
  /// empty_cache and stats): a warm allocate/free pair then finds its own block again, exactly
  /// sized, instead of splitting and re-merging a segment every time.
  void free_block(block* b) {
    st.active_bytes.sub(static_cast<std::int64_t>(b->size));
    st.active_count.sub(1);
    insert_free(b);
    if (b->is_split() && !b->queued) {
      b->queued = true;
      unmerged.push_back(b);
    }
  }

  /// Merges the blocks freed since the last call with their free neighbours. Entries may be
  /// stale (merged away, or allocated again since): the `queued` flag tells.
  void coalesce() {
    for (block* b : unmerged) {
      if (!b->queued) continue;
      b->queued = false;
      if (!b->in_free_set) continue;
      while (b->prev && b->prev->in_free_set) b = merge(b->prev, b);
      while (b->next && b->next->in_free_set) b = merge(b, b->next);
    }
    unmerged.clear();
  }

  /// a absorbs its free right neighbour n; both are free. Returns a.
  block* merge(block* a, block* n) {
    remove_free(a);
    remove_free(n);
    a->size += n->size;
    a->next = n->next;
    if (n->next) n->next->prev = a;
    retire(n);
    insert_free(a);
    return a;
  }

  void process_events() {
    if (pending.empty()) return;
    poll_completed(
        pending, [&](const auto& entry) { return backend.event_done(entry.first); },
        [&](const auto& entry) {
          backend.release_event(entry.first);
          if (--entry.second->pending_events == 0) free_block(entry.second);
        });
  }

  std::uintptr_t alloc_segment(std::size_t bytes) {
    if (o.reserved_limit != SIZE_MAX &&
        static_cast<std::size_t>(st.reserved_bytes.current) + bytes > o.reserved_limit)
      return 0;
    void* p = backend.allocate(bytes);
    return reinterpret_cast<std::uintptr_t>(p);
  }

  empty_cache_report release_cached() {
    coalesce();
    empty_cache_report r;
    for (auto it = segments.begin(); it != segments.end();) {
      block* h = *it;
      if (!h->next && h->is_free() && h->in_free_set) {
        remove_free(h);
        backend.deallocate(reinterpret_cast<void*>(h->ptr), h->segment_bytes);
        st.reserved_bytes.sub(static_cast<std::int64_t>(h->segment_bytes));
        st.segment_count.sub(1);
        ++st.device_frees;
        record(history_kind::segment_free, h->ptr, h->segment_bytes, h->stream);
        r.released_bytes += h->segment_bytes;
        ++r.released_segments;
        it = segments.erase(it);
        retire(h);
        continue;
      }
      r.kept_bytes += h->segment_bytes;
      bool in_use = false, waiting = false;
      for (block* b = h; b; b = b->next) {
        in_use |= b->allocated;
        waiting |= !b->allocated && b->pending_events > 0;
      }
      if (in_use)
        ++r.kept_in_use_segments;
      else if (waiting)
        ++r.kept_pending_segments;
      ++it;
    }
    return r;
  }

  void fill_free_stats(allocator_stats& s) const {
    std::size_t total = 0, largest = 0;
    for (const free_set* p : {&small_free, &large_free})
      for (const block* b : *p) {
        total += b->size;
        largest = std::max(largest, b->size);
      }
    s.cached_free_bytes = total;
    s.largest_free_block = largest;
    s.fragmentation = total ? 1.0 - static_cast<double>(largest) / static_cast<double>(total) : 0.0;
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
                    limit, backend.name(), mib(dev_free), mib(dev_total)),
        bytes);
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
  std::lock_guard lock(impl_->mutex);
  try {
    impl_->backend.synchronize();
  } catch (...) {
  }
  impl_->process_events();
  (void)impl_->release_cached();
  for (auto& [e, b] : impl_->pending) impl_->backend.release_event(e);
  for (block* h : impl_->segments) {  // still in use: the memory stays with its users
    for (block* b = h; b;) {
      block* n = b->next;
      delete b;
      b = n;
    }
  }
}

void* caching_allocator::allocate(std::size_t bytes, stream_handle stream) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.process_events();
  const std::size_t rounded = round_request(bytes);
  const bool small = is_small_request(rounded);
  alloc_source source = alloc_source::cache_hit;
  block* b = m.find_free(stream, rounded, small);
  if (!b && !m.unmerged.empty()) {  // merged neighbours may fit where no single block did
    m.coalesce();
    b = m.find_free(stream, rounded, small);
  }
  if (b) {
    m.remove_free(b);
  } else {
    const std::size_t seg = small ? kSmallSegment : segment_size_for(rounded);
    std::uintptr_t p = m.alloc_segment(seg);
    source = alloc_source::new_segment;
    if (!p) {
      // Free what the cache holds (after letting pending stream work finish) and try again.
      m.backend.synchronize();
      m.process_events();
      (void)m.release_cached();
      p = m.alloc_segment(seg);
      if (!p) m.throw_oom(bytes, rounded, stream);
      ++m.st.alloc_retries;
      source = alloc_source::after_retry;
    }
    b = m.new_block();
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    b->segment_bytes = seg;
    m.segments.insert(b);
    m.st.reserved_bytes.add(static_cast<std::int64_t>(seg));
    m.st.segment_count.add(1);
    ++m.st.device_allocations;
    m.record(history_kind::segment_alloc, p, seg, stream);
  }
  if (m.should_split(b, rounded)) {
    auto* rest = m.new_block();
    rest->ptr = b->ptr + rounded;
    rest->size = b->size - rounded;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    m.insert_free(rest);
    if (source == alloc_source::cache_hit) source = alloc_source::split;
  }
  b->allocated = true;
  b->requested = bytes;
  m.active.insert(b->ptr, b);
  auto& st = m.st;
  st.allocated_bytes.add(static_cast<std::int64_t>(b->size));
  st.requested_bytes.add(static_cast<std::int64_t>(bytes));
  st.active_bytes.add(static_cast<std::int64_t>(b->size));
  st.allocation_count.add(1);
  st.active_count.add(1);
  m.record(history_kind::alloc, b->ptr, b->size, stream);
  if (m.trace)
    m.trace({bytes, rounded, small, stream, source, st.allocated_bytes.current,
             st.reserved_bytes.current});
  return reinterpret_cast<void*>(b->ptr);
}

void caching_allocator::deallocate(void* p) {
  if (!p) return;
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  block* b = m.active.erase(reinterpret_cast<std::uintptr_t>(p));
  if (!b)
    throw logic_error(fmt::format("deallocate({}): not a live allocation of this allocator", p));
  auto& st = m.st;
  st.allocated_bytes.sub(static_cast<std::int64_t>(b->size));
  st.requested_bytes.sub(static_cast<std::int64_t>(b->requested));
  st.allocation_count.sub(1);
  b->allocated = false;
  m.record(history_kind::free, b->ptr, b->size, b->stream);
  if (!b->stream_uses.empty()) {
    for (stream_handle s : b->stream_uses) {
      m.pending.emplace_back(m.backend.record_event(s), b);
      ++b->pending_events;
    }
    b->stream_uses.clear();
    return;
  }
  m.free_block(b);
}

void caching_allocator::record_stream(void* p, stream_handle stream) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  block* b = m.active.find(reinterpret_cast<std::uintptr_t>(p));
  if (!b) throw logic_error(fmt::format("record_stream({}): not a live allocation", p));
  if (stream == b->stream) return;  // the owning stream orders its own reuse
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

std::size_t caching_allocator::block_size(void* p) const {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const block* b = m.active.find(reinterpret_cast<std::uintptr_t>(p));
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
  m.coalesce();  // report the cache as it is after merging
  allocator_stats s = m.st;
  m.fill_free_stats(s);
  return s;
}

void caching_allocator::reset_peak_stats() {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  for (memory_stat* s : {&m.st.allocated_bytes, &m.st.requested_bytes, &m.st.reserved_bytes,
                         &m.st.active_bytes, &m.st.inactive_split_bytes, &m.st.allocation_count,
                         &m.st.segment_count, &m.st.active_count, &m.st.inactive_split_count})
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
  m.coalesce();
  std::vector<segment_view> out;
  for (const block* h : m.segments) {
    segment_view sv;
    sv.ptr = h->ptr;
    sv.total_size = h->segment_bytes;
    sv.stream = h->stream;
    sv.small = h->small;
    for (const block* b = h; b; b = b->next) {
      block_view bv;
      bv.ptr = b->ptr;
      bv.size = b->size;
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
    }
    out.push_back(std::move(sv));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
  return out;
}

void caching_allocator::set_trace_callback(std::function<void(const alloc_trace&)> cb) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
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

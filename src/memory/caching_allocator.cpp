// The caching allocator: its options and rounding, the alloc/free paths (shared, and through
// the calling thread's cache, whose per-thread slots are here), and the public methods. The
// internals it shares with the other caching_allocator_*.cpp files: caching_allocator_impl.hpp.
#include "gpu_basics/memory/caching_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "caching_allocator_impl.hpp"
#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

std::size_t round_request(std::size_t bytes) noexcept {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}
namespace {

/// The keys memory owns: the allocator's options beyond PyTorch's policy.
struct memory_key {
  const char* name;
  const char* accepts;
  const char* example;
  void (*apply)(allocator_options& o, std::string_view value);
};

constexpr memory_key kMemoryKeys[] = {
    {"page_release", "deferred, eager or keep", "eager",
     [](allocator_options& o, std::string_view v) {
       try {
         o.release_pages = parse_page_release(v);
       } catch (const logic_error&) {
         throw logic_error(fmt::format(
             "allocator conf: page_release: expected deferred, eager or keep, got '{}'", v));
       }
     }},
    {"thread_cache_blocks", "an integer from 0 to 64", "16",
     [](allocator_options& o, std::string_view v) {
       std::size_t n = 0;
       const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
       if (v.empty() || r.ec != std::errc{} || r.ptr != v.data() + v.size() || n > kMaxThreadCache)
         throw logic_error(fmt::format(
             "allocator conf: thread_cache_blocks: expected an integer from 0 to {}, got '{}'",
             kMaxThreadCache, v));
       o.thread_cache_blocks = n;
     }},
};

}  // namespace

void register_allocator_keys() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const memory_key& k : kMemoryKeys)
      register_allocator_key(
          {k.name, "memory", k.accepts, k.example, false, [apply = k.apply](std::string_view v) {
             allocator_options scratch;
             apply(scratch, v);
           }});
  });
}

allocator_options parse_allocator_options(std::string_view conf, allocator_options base) {
  register_allocator_keys();
  for (const conf_entry& e : check_allocator_conf(conf)) {  // all checked before any applies
    if (apply_policy_key(base, e.key, e.value)) continue;
    for (const memory_key& k : kMemoryKeys)
      if (e.key == k.name) k.apply(base, e.value);
  }
  return base;
}

allocator_options allocator_options_of(const allocator_policy& policy, std::string_view conf) {
  allocator_options base;
  static_cast<allocator_policy&>(base) = policy;
  return parse_allocator_options(conf, base);
}

std::string to_conf_string(const allocator_options& o) {
  const allocator_options d;
  std::string s = to_conf_string(static_cast<const allocator_policy&>(o));
  const auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ",") + part; };
  if (o.release_pages != d.release_pages)
    add(fmt::format("page_release:{}", to_string(o.release_pages)));
  if (o.thread_cache_blocks != d.thread_cache_blocks)
    add(fmt::format("thread_cache_blocks:{}", o.thread_cache_blocks));
  return s;
}

allocator_options allocator_options_from_environment(allocator_options base) {
  const char* conf = std::getenv(kAllocConfEnv);
  if (!conf) return base;
  try {
    return parse_allocator_options(conf, base);
  } catch (const logic_error& e) {
    throw logic_error(fmt::format("{}: {}", kAllocConfEnv, e.what()));
  }
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

bool oversize_block_refused(std::size_t block_bytes, std::size_t rounded,
                            const allocator_options& o) noexcept {
  if (rounded < o.max_split_size) return block_bytes >= o.max_split_size;
  return block_bytes >= rounded + kOversizeSlack;
}

std::string_view to_string(block_state s) noexcept {
  switch (s) {
    case block_state::active_allocated:
      return "active_allocated";
    case block_state::active_pending_free:
      return "active_pending_free";
    case block_state::inactive:
      break;
  }
  return "inactive";
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

/// The slot this thread used last, in plain thread_locals (constant-initialized, trivially
/// destructible: read without the guard a thread_local with a destructor costs on every access).
/// Cleared when the slots are destroyed.
thread_local std::uint64_t tls_last_id = 0;
thread_local thread_cache* tls_last_cache = nullptr;

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
    tls_last_id = 0;
    tls_last_cache = nullptr;
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
    if (ids[i]) {
      if (tls_last_id == ids[i]) tls_last_id = 0;
      orphan(ids[i], caches[i]);
    }
    ids[i] = id;
    caches[i] = c;
  }
};
thread_local thread_slots tls_caches;

}  // namespace

caching_allocator::impl::impl(allocator_backend& b, allocator_options opts)
    : backend(b),
      o(opts),
      id(next_allocator_id.fetch_add(1)),
      vmm(opts.expandable_segments && b.supports_virtual_memory()),
      fast_ok(opts.thread_cache_blocks > 0 && opts.history_capacity == 0),
      plain_rounding(std::all_of(opts.roundup_power2_divisions.begin(),
                                 opts.roundup_power2_divisions.end(),
                                 [](std::size_t d) { return d <= 1; })),
      asymmetric(asymmetric_fences()) {
  o.thread_cache_blocks = std::min(o.thread_cache_blocks, kMaxThreadCache);
  std::lock_guard lock(registry_mutex());
  live_allocators().insert(id);
}

thread_cache* caching_allocator::impl::my_cache() const noexcept {
  if (!fast_ok) return nullptr;
  if (tls_last_id == id) return tls_last_cache;
  thread_cache* c = tls_caches.find(id);
  if (c) {
    tls_last_id = id;
    tls_last_cache = c;
  }
  return c;
}

thread_cache* caching_allocator::impl::calling_thread_cache() const noexcept {
  return my_cache();
}

thread_cache* caching_allocator::impl::my_cache_or_new() {
  if (!fast_ok || tls_dead) return nullptr;
  if (thread_cache* c = tls_caches.find(id)) return c;
  caches.push_back(std::make_unique<thread_cache>(o.thread_cache_blocks));
  caches.back()->orphans = &orphans;
  tls_caches.put(id, caches.back().get());
  return caches.back().get();
}

/// Best fit on `stream` under PyTorch's rules for oversize blocks (max_split_size). With
/// expandable ranges, a free block at the mapped end of a range counts as large as it could
/// grow, as PyTorch's get_free_block does.
block* caching_allocator::impl::find_free(stream_handle stream, std::size_t rounded, bool small) {
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
    for (auto next = std::next(it); (*it)->range && next != p.end() && (*next)->stream == stream &&
                                    growable(*next) < growable(*it);
         ++next)
      it = next;
  }
  block* b = *it;
  return oversize_block_refused(b->size, rounded, o) ? nullptr : b;
}

/// A new plain segment for `rounded`, outside every set; nullptr when the backend has none.
block* caching_allocator::impl::new_segment(std::size_t rounded, bool small, stream_handle stream) {
  const std::size_t seg = small ? kSmallSegment : segment_size_for(rounded);
  if (!within_limit(seg)) return nullptr;
  const auto p = reinterpret_cast<std::uintptr_t>(timed([&] { return backend.allocate(seg); }));
  if (!p) return nullptr;
  block* b = new_block(p, seg, stream, small);
  b->segment_bytes = seg;
  segments.insert(b);
  add_reserved(seg, small);
  count(small, [](pool_stats& s) { s.segment_count.add(1); });
  ++st.device_allocations;
  record(history_kind::segment_alloc, p, seg, stream);
  return b;
}

/// A block for `rounded` from the backend: a mapped part of an expandable range, or a new
/// segment. Free (in its free set) for a range, outside every set for a segment.
block* caching_allocator::impl::from_backend(std::size_t rounded, bool small,
                                             stream_handle stream) {
  if (vmm) return expandable_block(rounded, small, stream);
  return new_segment(rounded, small, stream);
}

/// What every operation on the shared cache starts with: the calling thread's cache emptied
/// into the shared cache (its counters folded, its epoch moved on), and caches of threads
/// that ended reclaimed. With one thread, every decision below then sees the cache exactly as
/// plain merge-on-free would have it. Other threads' caches are left alone (sweeping them
/// on every miss would make each thread's misses everybody's), except before the allocator
/// asks the backend for memory (allocate_slow).
void caching_allocator::impl::begin_shared_operation() {
  // The caller's own cache: no other thread touches it without the lock held here.
  if (thread_cache* c = my_cache()) sweep(*c, true);
  if (orphans.load(std::memory_order_acquire) != 0) reclaim_orphans();
}

/// A block of `rounded` bytes taken out of the cache (split as needed) or from the backend,
/// with memory behind every page it touches; nullptr when the device (or the reserved limit)
/// has no room left.
block* caching_allocator::impl::place(std::size_t rounded, bool small, stream_handle stream,
                                      alloc_source& source) {
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

void* caching_allocator::impl::allocate_slow(std::size_t bytes, stream_handle stream) {
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
  count(small, [&](pool_stats& s) {
    s.allocated_bytes.add(static_cast<std::int64_t>(b->size));
    s.requested_bytes.add(static_cast<std::int64_t>(bytes));
    s.active_bytes.add(static_cast<std::int64_t>(b->size));
    s.allocation_count.add(1);
    s.active_count.add(1);
  });
  record(history_kind::alloc, b->ptr, b->size, stream);
  if (trace)
    trace({bytes, rounded, small, stream, source, st.allocated_bytes.current,
           st.reserved_bytes.current});
  return reinterpret_cast<void*>(b->ptr);
}

void caching_allocator::impl::deallocate_slow(std::uintptr_t p) {
  begin_shared_operation();
  block* b = find_live(p);
  if (!b)
    throw logic_error(fmt::format("deallocate({:#x}): not a live allocation of this allocator", p));
  active.erase(p);
  count(b->small, [&](pool_stats& s) {
    s.allocated_bytes.sub(static_cast<std::int64_t>(b->size));
    s.requested_bytes.sub(static_cast<std::int64_t>(b->requested));
    s.allocation_count.sub(1);
  });
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
    if (thread_cache* c = my_cache_or_new()) {  // the caller's own: the lock held keeps others out
      if (c->n_cached + c->n_out < c->capacity) {
        count(true, [&](pool_stats& s) {
          s.active_bytes.sub(static_cast<std::int64_t>(b->size));
          s.active_count.sub(1);
        });
        b->owner = c;
        c->cached[c->n_cached] = b;
        c->set_cached(c->n_cached + 1);
        return;
      }
    }
  }
  free_block(b);
}

namespace {
/// The backend, checked before anything dereferences it.
std::shared_ptr<allocator_backend> checked(std::shared_ptr<allocator_backend> backend) {
  GPU_BASICS_EXPECTS(backend != nullptr, "caching_allocator needs a backend");
  return backend;
}

/// `o` with its per_process_memory_fraction as a reserved limit on `b`'s device (the tighter of
/// the two where both are set), as PyTorch applies the fraction to the device's total memory.
allocator_options with_fraction(allocator_backend& b, allocator_options o) {
  if (o.per_process_memory_fraction > 0)
    o.reserved_limit = std::min(
        o.reserved_limit, fraction_limit(o.per_process_memory_fraction, b.memory_info().second));
  return o;
}
}  // namespace

caching_allocator::caching_allocator(std::shared_ptr<allocator_backend> backend,
                                     allocator_options o)
    : backend_(checked(std::move(backend))),
      o_(with_fraction(*backend_, o)),
      impl_(std::make_unique<impl>(*backend_, o_)) {}

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
      const owner_section section(c->hs, m.asymmetric);
      if (section && is_small_request(rounded)) {
        for (std::size_t k = 0; k < c->n_cached; ++k) {
          block* b = c->cached[k];
          if (b->stream != stream || b->size < rounded || b->size - rounded >= kMinBlock) continue;
          c->cached[k] = c->cached[c->n_cached - 1];
          c->set_cached(c->n_cached - 1);
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
    const owner_section section(c->hs, m.asymmetric);
    for (std::size_t k = 0; section && k < c->n_out; ++k) {
      block* b = c->out[k];
      if (b->ptr != addr) continue;
      if (!b->stream_uses.empty()) break;  // used on other streams: events, on the slow path
      if (b->epoch != c->epoch) break;     // the shared cache may have changed since
      c->out[k] = c->out[--c->n_out];
      c->cached[c->n_cached] = b;
      c->set_cached(c->n_cached + 1);
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

void caching_allocator::set_history_capacity(std::size_t events) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.o.history_capacity = o_.history_capacity = events;
  while (m.hist.size() > events) m.hist.pop_front();
  m.traced.store(static_cast<bool>(m.trace) || events > 0);
  m.sweep_caches(impl::sweep_mode::empty);
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

}  // namespace gpu_basics

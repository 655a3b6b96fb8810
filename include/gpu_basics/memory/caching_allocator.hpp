// A caching device allocator in the PyTorch mould: requests are rounded to 512 bytes (or to
// PyTorch's roundup_power2_divisions) and served best-fit from cached segments (2 MiB for
// requests up to 1 MiB, 20 MiB for 1-10 MiB, rounded to 2 MiB above); blocks split, and a freed
// block merges with its free neighbours at once (as PyTorch's free_block does); a freed block is
// reused on the stream it was allocated on, and one used on other streams (record_stream) only
// after events on those streams complete. With expandable_segments, each stream's pool is one
// virtual address range that grows by mapping physical pages: blocks are laid out as PyTorch lays
// them out, and pages wholly inside free blocks give their memory back when reserved would pass
// its highest mark (and on empty_cache), so the pages holding memory are a subset of PyTorch's.
//
// Threads: the cache itself is guarded by one lock, and each thread keeps a small cache of the
// small blocks it freed last (thread_cache_blocks), so a thread that frees and allocates again
// the same size on the same stream touches no shared state. A block waits in a thread cache only
// where merge-on-free would hand it back at the same address; a thread's operation on the shared
// cache first empties its own cache into it, and other threads' caches are emptied before the
// allocator asks the backend for memory, so they never make it reserve more. With one thread,
// placement is exactly merge-on-free's. The bookkeeping is host-only over an allocator_backend,
// so it is tested on a CPU with fake_backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/core/allocator_conf.hpp"
#include "gpu_basics/core/memory_usage.hpp"
#include "gpu_basics/memory/backend.hpp"

namespace gpu_basics {

/// When the free pages of expandable segments give their memory back (Note [Deferred page
/// release] in caching_allocator.cpp; docs/torch_bridge.md has the H200 measurements behind the
/// default).
enum class page_release {
  /// Never, except on empty_cache and before an out-of-memory retry: PyTorch's own behaviour,
  /// with PyTorch's peak and its count of maps. The default.
  keep,
  /// Once reserved would pass its highest mark, the free pages of that stream and pool are
  /// unmapped at once, after a device synchronisation: the lowest peak, at the cost of a stall
  /// of the CPU's lead over the GPU at each such release.
  eager,
  /// As eager, without the synchronisation: the pages retire (an event on their stream) and are
  /// unmapped at a later allocator call once it is done; a retired page a block needs before
  /// then is taken back as it is. Lowers what is held between peaks, not the peak of a loop
  /// whose GPU runs behind its CPU.
  deferred,
};

/// "deferred", "eager", "keep".
[[nodiscard]] std::string_view to_string(page_release p) noexcept;
/// The policy of a name (to_string's).
/// @throws logic_error naming the value and the accepted ones.
[[nodiscard]] page_release parse_page_release(std::string_view name);

struct allocator_options : allocator_policy {
  // From allocator_policy (core/allocator_conf.hpp), PyTorch's knobs: max_split_size,
  // roundup_power2_divisions, garbage_collection_threshold, expandable_segments. Expandable
  // segments need a backend with virtual memory (supports_virtual_memory()); without one the
  // allocator falls back to plain segments.

  /// Upper bound on reserved (cached + in use) bytes, as PyTorch's per-process memory fraction;
  /// SIZE_MAX: none. A per_process_memory_fraction (allocator_policy) lowers it at construction
  /// to the fraction of the backend's total memory (memory_info()).
  std::size_t reserved_limit = SIZE_MAX;
  /// Keep the last `history_capacity` events (0 = no history).
  std::size_t history_capacity = 0;
  /// Freed small blocks (up to 1 MiB) each thread keeps for its next allocation of the same size
  /// and stream without taking the shared lock (0 = none; at most 64). Off while a history is
  /// kept or a trace callback is set.
  std::size_t thread_cache_blocks = 8;
  /// When free pages of expandable ranges give their memory back.
  page_release release_pages = page_release::keep;

  bool operator==(const allocator_options&) const = default;
};

/// Registers the allocator's own keys (page_release, thread_cache_blocks) with core's registry
/// (core/allocator_conf.hpp), which holds PyTorch's already: once, whoever calls first.
/// parse_allocator_options calls it; so does whatever checks a conf string before any is parsed
/// (the CLI at its start, the lessons' registry), since a key not yet registered is unknown.
void register_allocator_keys();

/// The allocator's options from a conf string in PYTORCH_CUDA_ALLOC_CONF's syntax applied over
/// `base`: PyTorch's keys (apply_policy_keys), plus gpu-basics' own page_release:deferred|
/// eager|keep (see page_release) and thread_cache_blocks:N (0 to 64). Every registered key is
/// one of these or ignored (allocator_keys()).
/// @throws logic_error naming the bad part of the string.
[[nodiscard]] allocator_options parse_allocator_options(std::string_view conf,
                                                        allocator_options base = {});
/// The options of the configuration's memory.allocator: `policy` (its individual keys), then
/// `conf` (memory.allocator.conf) over it.
/// @throws logic_error naming the bad part of `conf`.
[[nodiscard]] allocator_options allocator_options_of(const allocator_policy& policy,
                                                     std::string_view conf);
/// The conf string of what differs from the defaults, every key of parse_allocator_options.
[[nodiscard]] std::string to_conf_string(const allocator_options& o);

/// The environment variable a process's allocator reads its conf string from (the PyTorch
/// bridge: src/torch_alloc): GPU_BASICS_ALLOC_CONF.
inline constexpr const char* kAllocConfEnv = "GPU_BASICS_ALLOC_CONF";
/// The options of GPU_BASICS_ALLOC_CONF (the defaults where it is unset) over `base`.
/// @throws logic_error naming the variable and the bad part of its value.
[[nodiscard]] allocator_options allocator_options_from_environment(allocator_options base = {});

/// current / peak / total counts of one quantity.
struct memory_stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  // total increments
  std::int64_t freed = 0;      // total decrements
  /// Counts `n` more: current and allocated grow, peak follows current.
  void add(std::int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  /// Counts `n` fewer: current shrinks, freed grows.
  void sub(std::int64_t n) {
    current -= n;
    freed += n;
  }
  bool operator==(const memory_stat&) const = default;
};

/// The counters of one pool, or of both together (allocator_stats's own).
struct pool_stats {
  memory_stat allocated_bytes;       // rounded sizes of blocks handed out
  memory_stat requested_bytes;       // sizes as asked
  memory_stat reserved_bytes;        // segments held from the backend
  memory_stat active_bytes;          // handed out, or freed but awaiting other streams' events
  memory_stat inactive_split_bytes;  // free blocks inside split segments (fragments)
  memory_stat allocation_count;
  memory_stat segment_count;
  memory_stat active_count;
  memory_stat inactive_split_count;
  bool operator==(const pool_stats&) const = default;
};

/// The counters of both pools (the pool_stats base, PyTorch's ".all."), of each pool apart, and
/// the allocator's own. A block belongs to the pool its request chose (is_small_request: PyTorch's
/// small pool up to 1 MiB, large above), expandable ranges included, so for current, allocated
/// and freed the base is small_pool + large_pool at every moment; each peak is its own pool's.
struct allocator_stats : pool_stats {
  pool_stats small_pool;
  pool_stats large_pool;
  std::int64_t device_allocations = 0;  // backend allocate() calls that succeeded
  std::int64_t device_frees = 0;
  std::int64_t alloc_retries = 0;  // allocations that needed the cache freed first
  std::int64_t ooms = 0;
  std::int64_t device_syncs = 0;     // device synchronisations made by the allocator
  std::int64_t device_call_ns = 0;   // host time inside backend calls (allocate, map, unmap, free,
                                     // synchronise): what the allocator costs beyond bookkeeping
  std::int64_t pages_retired = 0;    // expandable pages retired (deferred release)
  std::int64_t pages_reclaimed = 0;  // retired pages a new block took back before their unmap
  // Claims of other live threads' caches by the lock holder (one heavy fence each: membarrier
  // where the kernel has it), and the host time they took: what frees from another thread
  // (PyTorch's autograd thread) and shared-cache operations cost once several threads allocate.
  // stats() claims too, once per call when other threads have caches.
  std::int64_t cache_claims = 0;
  std::int64_t cache_claim_ns = 0;
  std::size_t cached_free_bytes = 0;  // free bytes in the cache
  std::size_t largest_free_block = 0;
  double fragmentation = 0;  // 1 - largest free block / total free (0 with nothing free)
};

/// How one allocation was served (for debug logs and tests).
enum class alloc_source { cache_hit, split, new_segment, after_retry };

struct alloc_trace {
  std::size_t requested;
  std::size_t rounded;
  bool small_pool;
  stream_handle stream;
  alloc_source source;
  std::int64_t allocated_after;
  std::int64_t reserved_after;
};

struct empty_cache_report {
  std::size_t released_bytes = 0;
  std::size_t released_segments = 0;
  std::size_t kept_bytes = 0;            // reserved bytes still held
  std::size_t kept_in_use_segments = 0;  // segments with a block still allocated (split and in use)
  std::size_t kept_pending_segments = 0;  // segments with a block awaiting stream events
};

/// History events, named as PyTorch's memory snapshot names them: `free` is the free request
/// (free_requested); a block used on other streams is free_completed only after their events.
/// With expandable segments, segment_map / segment_unmap grow and shrink a stream's range.
enum class history_kind {
  alloc,
  free,
  segment_alloc,
  segment_free,
  oom,
  free_completed,
  segment_map,
  segment_unmap
};

struct history_event {
  history_kind kind;
  std::uint64_t time_ns;  // host_clock_ns() (core/clock.hpp)
  std::uintptr_t ptr;
  std::size_t bytes;
  stream_handle stream;
};

/// For logs: "hit", "split", "new segment", "new segment after freeing the cache".
[[nodiscard]] std::string_view to_string(alloc_source s) noexcept;
/// For history JSON: "alloc", "free", "segment_alloc", "segment_free", "oom", "free_completed",
/// "segment_map", "segment_unmap".
[[nodiscard]] std::string_view to_string(history_kind k) noexcept;

// Request size rounding and pool choice, as the allocator applies them.
/// `bytes` rounded up to a multiple of 512 (512 at least).
[[nodiscard]] std::size_t round_request(std::size_t bytes) noexcept;
/// `bytes` rounded as the allocator rounds it under `o` (roundup_power2_divisions, as PyTorch's
/// round_size: divisions apply only above 512 x divisions bytes).
[[nodiscard]] std::size_t round_request(std::size_t bytes, const allocator_options& o) noexcept;
/// Whether a rounded request is served from the small pool (up to 1 MiB).
[[nodiscard]] bool is_small_request(std::size_t rounded) noexcept;
/// The segment a rounded request takes from the backend when the cache cannot serve it: 2 MiB
/// up to 1 MiB, 20 MiB below 10 MiB, else the request rounded up to 2 MiB.
[[nodiscard]] std::size_t segment_size_for(std::size_t rounded) noexcept;
/// Large segments are whole multiples of this (2 MiB), as expandable segments' pages are.
inline constexpr std::size_t kLargePageBytes = std::size_t{2} << 20;
/// How far a free block may exceed a request of max_split_size or more and still serve it
/// (PyTorch's kLargeBuffer, 20 MiB).
inline constexpr std::size_t kOversizeSlack = std::size_t{20} << 20;
/// PyTorch's rule for oversize blocks (max_split_size_mb, as its get_free_block applies it): a
/// request under max_split_size never takes a free block of max_split_size or more, and one of
/// max_split_size or more takes only a block less than kOversizeSlack larger than itself.
/// Whether the rule keeps a free block of `block_bytes` from serving a request of `rounded`
/// bytes under `o`.
[[nodiscard]] bool oversize_block_refused(std::size_t block_bytes, std::size_t rounded,
                                          const allocator_options& o) noexcept;

/// A block's state, as PyTorch's snapshots name it (to_string).
enum class block_state : std::uint8_t {
  active_allocated,     // in use
  active_pending_free,  // freed, awaiting other streams' events (record_stream)
  inactive,             // free in the cache, or in a thread cache
};
/// "active_allocated", "active_pending_free", "inactive".
[[nodiscard]] std::string_view to_string(block_state s) noexcept;

/// One block of a segment, for snapshots (PyTorch's memory_viz "blocks").
struct block_view {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // 0 unless allocated
  block_state state = block_state::inactive;
  bool mapped = true;  // false for the unmapped part of an expandable segment (not listed)
};

/// One segment (or, with expandable segments, one run of pages with memory of a stream's range)
/// and its blocks in address order. Parts of an expandable range without memory (unmapped, or
/// pages of free blocks given back) are left out of `blocks`; total_size counts bytes with
/// memory only.
struct segment_view {
  std::uintptr_t ptr = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;
  std::size_t active_size = 0;
  std::size_t requested_size = 0;
  stream_handle stream = 0;
  bool small = false;
  bool expandable = false;
  std::vector<block_view> blocks;
};

class caching_allocator {
 public:
  /// An allocator over `backend`, which it shares.
  /// @throws logic_error when backend is null.
  explicit caching_allocator(std::shared_ptr<allocator_backend> backend, allocator_options o = {});
  /// Returns every cached segment; blocks still allocated are leaked to the backend (reported by
  /// stats, never freed under a user).
  ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// Memory for `bytes` usable on `stream`.
  /// @throws out_of_memory (with the allocator's state in the message) when neither the cache
  /// nor the backend can serve it.
  /// @throws cuda_error (CUDA backends) when a backend call fails otherwise.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_handle stream = 0);
  /// Returns a block (nullptr is ignored). If it was used on other streams (record_stream), it
  /// is reused only after events recorded now on those streams complete.
  /// @throws logic_error for a pointer that is not a live allocation of this allocator.
  /// @throws cuda_error (CUDA backends) when an event cannot be recorded.
  void deallocate(void* p);
  /// Marks that `stream` uses the block at `p` (as torch's record_stream).
  /// @throws logic_error for a pointer that is not a live allocation.
  void record_stream(void* p, stream_handle stream);

  /// The size of the block behind a live allocation (>= the rounded request: a remainder too
  /// small to split stays with it).
  /// @throws logic_error for a pointer that is not a live allocation.
  [[nodiscard]] std::size_t block_size(void* p) const;

  /// Returns every free, unsplit segment to the backend.
  /// @throws cuda_error (CUDA backends) when a pending event's query fails.
  empty_cache_report empty_cache();

  /// The counters now, with the cache's free bytes and fragmentation after merging neighbours.
  [[nodiscard]] allocator_stats stats() const;
  /// Sets every peak to its current value, so the next peaks are of what follows.
  void reset_peak_stats();
  /// Keeps the last `events` events from now on (0: none, and the kept ones are dropped), as
  /// torch.cuda.memory._record_memory_history(max_entries=...). Thread caches are bypassed
  /// while a history is kept, so every event is seen.
  void set_history_capacity(std::size_t events);
  /// The last options().history_capacity events, oldest first.
  [[nodiscard]] std::vector<history_event> history() const;
  /// Every segment and its blocks now, by address (for memory snapshots).
  [[nodiscard]] std::vector<segment_view> segments() const;

  /// Called (under the allocator's lock) for each allocation: keep it cheap.
  void set_trace_callback(std::function<void(const alloc_trace&)> cb);

  /// Changes the reserved limit (PyTorch's set_per_process_memory_fraction, which may come after
  /// the first allocation). Memory reserved beyond a lowered limit stays until it is freed.
  void set_reserved_limit(std::size_t bytes);

  /// The options given at construction (with the reserved limit and history capacity last
  /// set): a copy, taken under the lock, since another thread may set them.
  [[nodiscard]] allocator_options options() const;
  /// The backend segments come from.
  [[nodiscard]] allocator_backend& backend() noexcept { return *backend_; }

  struct impl;

 private:
  std::shared_ptr<allocator_backend> backend_;
  allocator_options o_;
  std::unique_ptr<impl> impl_;
};

/// JSON of the allocator's records for results files (kinds as their to_string names).
void to_json(nlohmann::json& j, const memory_stat& s);
/// The counters by name ("allocated_bytes", ...), as allocator_stats's JSON names them.
void to_json(nlohmann::json& j, const pool_stats& s);
/// The counters of both pools and the allocator's own; the pools apart are left out (results files
/// keep their keys): write small_pool and large_pool as pool_stats where they are wanted.
void to_json(nlohmann::json& j, const allocator_stats& s);
void to_json(nlohmann::json& j, const empty_cache_report& r);
void to_json(nlohmann::json& j, const history_event& e);

/// Allocated and reserved bytes after each event of `history` (alloc/free move the first,
/// segment_alloc/segment_free the second; oom changes nothing and gives no point), starting from
/// the given values: the input of a trace's memory counters (profiler/trace_counters.hpp).
[[nodiscard]] std::vector<memory_usage_point> memory_usage(
    const std::vector<history_event>& history, std::int64_t allocated_before = 0,
    std::int64_t reserved_before = 0);

}  // namespace gpu_basics

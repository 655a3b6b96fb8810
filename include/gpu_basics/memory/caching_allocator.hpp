// A caching device allocator in the PyTorch mould: requests are rounded to 512 bytes and served
// from cached segments (2 MiB for requests up to 1 MiB, 20 MiB for 1-10 MiB, rounded to 2 MiB
// above); blocks split and freed neighbours coalesce; a freed block is reused on the stream it
// was allocated on, and one used on other streams (record_stream) only after events on those
// streams complete. The bookkeeping is host-only over an allocator_backend, so it is tested on
// a CPU with fake_backend. Thread-safe: one lock guards it, so threads allocating at once
// serialize (8 threads on the H200 host: ~530 ns a pair against ~45 ns alone); sharding by
// stream would lift that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/core/memory_usage.hpp"
#include "gpu_basics/memory/backend.hpp"

namespace gpu_basics {

struct allocator_options {
  /// Blocks at least this large are never split, and requests below it never take them (limits
  /// fragmentation from large blocks). SIZE_MAX: no limit.
  std::size_t max_split_size = SIZE_MAX;
  /// Upper bound on reserved (cached + in use) bytes; SIZE_MAX: none.
  std::size_t reserved_limit = SIZE_MAX;
  /// Keep the last `history_capacity` events (0 = no history).
  std::size_t history_capacity = 0;
};

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

struct allocator_stats {
  memory_stat allocated_bytes;       // rounded sizes of blocks handed out
  memory_stat requested_bytes;       // sizes as asked
  memory_stat reserved_bytes;        // segments held from the backend
  memory_stat active_bytes;          // handed out, or freed but awaiting other streams' events
  memory_stat inactive_split_bytes;  // free blocks inside split segments (fragments)
  memory_stat allocation_count;
  memory_stat segment_count;
  memory_stat active_count;
  memory_stat inactive_split_count;
  std::int64_t device_allocations = 0;  // backend allocate() calls that succeeded
  std::int64_t device_frees = 0;
  std::int64_t alloc_retries = 0;  // allocations that needed the cache freed first
  std::int64_t ooms = 0;
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

enum class history_kind { alloc, free, segment_alloc, segment_free, oom };

struct history_event {
  history_kind kind;
  std::uint64_t time_ns;  // host_clock_ns() (core/clock.hpp)
  std::uintptr_t ptr;
  std::size_t bytes;
  stream_handle stream;
};

/// For logs: "hit", "split", "new segment", "new segment after freeing the cache".
[[nodiscard]] std::string_view to_string(alloc_source s) noexcept;
/// For history JSON: "alloc", "free", "segment_alloc", "segment_free", "oom".
[[nodiscard]] std::string_view to_string(history_kind k) noexcept;

// Request size rounding and pool choice, as the allocator applies them.
/// `bytes` rounded up to a multiple of 512 (512 at least).
[[nodiscard]] std::size_t round_request(std::size_t bytes) noexcept;
/// Whether a rounded request is served from the small pool (up to 1 MiB).
[[nodiscard]] bool is_small_request(std::size_t rounded) noexcept;
/// The segment a rounded request takes from the backend when the cache cannot serve it: 2 MiB
/// up to 1 MiB, 20 MiB below 10 MiB, else the request rounded up to 2 MiB.
[[nodiscard]] std::size_t segment_size_for(std::size_t rounded) noexcept;

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
  /// The last options().history_capacity events, oldest first.
  [[nodiscard]] std::vector<history_event> history() const;

  /// Called (under the allocator's lock) for each allocation: keep it cheap.
  void set_trace_callback(std::function<void(const alloc_trace&)> cb);

  /// The options given at construction.
  [[nodiscard]] const allocator_options& options() const noexcept { return o_; }
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

// A caching pool of pinned (page-locked) host memory. Pinning is slow (hundreds of ms per GiB),
// so freed blocks are kept and reused. Size classes are eighths of a power of two, so rounding
// wastes at most 12.5% (PyTorch rounds to powers of two and can pin twice what was asked). A
// block used by copies on streams (record_stream) is reused only after those streams pass
// events recorded at its free. Host-only bookkeeping over an allocator_backend. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/memory/backend.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

namespace gpu_basics {

/// The size class a request is served from: one page below 4 KiB, else the next multiple of
/// 2^(floor(log2 bytes) - 3).
[[nodiscard]] std::size_t pinned_size_class(std::size_t bytes) noexcept;

struct pinned_pool_stats {
  memory_stat allocated_bytes;  // size classes handed out
  memory_stat requested_bytes;
  memory_stat reserved_bytes;  // pinned in all (in use + cached)
  memory_stat allocation_count;
  std::int64_t backend_allocations = 0;
  std::int64_t backend_frees = 0;
  std::int64_t cache_hits = 0;
  double pin_seconds = 0;    // time spent in the backend's allocate (pinning)
  double unpin_seconds = 0;  // and in deallocate
};

class pinned_host_pool {
 public:
  /// A pool pinning through `backend` (cuda_pinned_backend on a GPU), which it shares.
  /// @throws logic_error when backend is null.
  explicit pinned_host_pool(std::shared_ptr<allocator_backend> backend);
  /// Waits for the backend, then unpins every cached block; blocks still allocated stay pinned.
  ~pinned_host_pool();
  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;

  /// A block of the request's size class, from the cache or newly pinned.
  /// @throws out_of_memory when the backend cannot pin the size class even after the cache is
  /// freed.
  /// @throws cuda_error (CUDA backend) when pinning or an event query fails otherwise.
  [[nodiscard]] void* allocate(std::size_t bytes);
  /// Returns a block (nullptr is ignored); one used on streams (record_stream) is reused once
  /// events recorded now on those streams complete.
  /// @throws logic_error for a pointer that is not a live allocation.
  /// @throws cuda_error (CUDA backend) when an event cannot be recorded.
  void deallocate(void* p);
  /// Marks that stream `s` uses the block at `p` (copies on it read or write it).
  /// @throws logic_error for a pointer that is not a live allocation.
  void record_stream(void* p, stream_handle s);
  /// Unpins every cached (free) block; returns the bytes released.
  /// @throws cuda_error (CUDA backend) when a pending event's query fails.
  std::size_t empty_cache();
  /// The pool's counters now.
  [[nodiscard]] pinned_pool_stats stats() const;

 private:
  struct block {
    void* ptr;
    std::size_t size;
    std::size_t requested = 0;
    bool allocated = false;
    int pending = 0;
    std::vector<stream_handle> uses;
  };
  void process_events();
  std::size_t release_cached();
  void* pin(std::size_t bytes);

  std::shared_ptr<allocator_backend> backend_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, block> blocks_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::vector<std::pair<event_handle, void*>> pending_;
  pinned_pool_stats st_;
};

/// JSON of the pool's counters, keyed by member name.
void to_json(nlohmann::json& j, const pinned_pool_stats& s);

}  // namespace gpu_basics

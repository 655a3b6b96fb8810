// What the caching allocators need from the machine: raw allocation, events on streams, and
// synchronisation. The bookkeeping above it is host-only, so a fake backend (host memory, a
// chosen capacity, events completed by the test) exercises all of it on a CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace gpu_basics {

/// An opaque stream handle (a cudaStream_t for the CUDA backends; any number for the fake).
using stream_handle = std::uintptr_t;
/// An opaque event handle owned by the backend.
using event_handle = void*;

class allocator_backend {
 public:
  virtual ~allocator_backend() = default;
  /// Raw memory of `bytes`, or nullptr when it cannot be had (out of memory).
  /// @throws cuda_error (CUDA backends) for a failure other than running out of memory.
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  /// Returns memory from allocate(), with the size it was asked for.
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// Records an event on `s` that completes when the work enqueued on `s` so far has.
  /// @throws cuda_error (CUDA backends) when the event cannot be created or recorded.
  [[nodiscard]] virtual event_handle record_event(stream_handle s) = 0;
  /// Whether the work `e` captured has completed; never blocks.
  /// @throws cuda_error (CUDA backends) when the query reports an error.
  [[nodiscard]] virtual bool event_done(event_handle e) = 0;
  /// Takes `e` back; it must not be used after.
  virtual void release_event(event_handle e) noexcept = 0;
  /// Waits for all outstanding work (all events complete afterwards).
  /// @throws cuda_error (CUDA backends) when the device reports an error.
  virtual void synchronize() = 0;
  /// {free, total} bytes of the memory this backend draws from.
  /// @throws cuda_error (CUDA device backend) when the query fails.
  [[nodiscard]] virtual std::pair<std::size_t, std::size_t> memory_info() = 0;
  /// A short name for messages ("cuda", "fake").
  [[nodiscard]] virtual const char* name() const noexcept = 0;
};

}  // namespace gpu_basics

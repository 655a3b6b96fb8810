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

  // Virtual memory, for expandable segments: address space is reserved once and memory is
  // mapped into it and unmapped again page by page. Backends without it keep the defaults.
  /// Whether reserve_address / map / unmap work.
  [[nodiscard]] virtual bool supports_virtual_memory() const noexcept { return false; }
  /// Reserves `bytes` of address space (no memory behind it), aligned to 2 MiB; 0 when it cannot.
  /// @throws cuda_error (CUDA backends) for a failure other than running out of address space.
  [[nodiscard]] virtual std::uintptr_t reserve_address(std::size_t /*bytes*/) { return 0; }
  /// Returns a range from reserve_address(), with its size; everything in it is unmapped.
  virtual void release_address(std::uintptr_t /*base*/, std::size_t /*bytes*/) noexcept {}
  /// Backs [ptr, ptr + bytes) inside a reserved range with memory (one page of the allocator: 2
  /// or 20 MiB, a multiple of 2 MiB); false when out of memory.
  /// @throws cuda_error (CUDA backends) for a failure other than running out of memory.
  [[nodiscard]] virtual bool map(std::uintptr_t /*ptr*/, std::size_t /*bytes*/) { return false; }
  /// Returns the memory of one earlier map() call, with the same ptr and bytes. Does not wait
  /// for the device: the caller makes sure no queued work still uses the page.
  virtual void unmap(std::uintptr_t /*ptr*/, std::size_t /*bytes*/) noexcept {}
  /// The address space one expandable range reserves: PyTorch reserves the device's memory plus
  /// an eighth.
  /// @throws cuda_error (CUDA backends) when the query fails.
  [[nodiscard]] virtual std::size_t address_space_bytes() {
    const std::size_t total = memory_info().second;
    return total + total / 8;
  }
};

}  // namespace gpu_basics

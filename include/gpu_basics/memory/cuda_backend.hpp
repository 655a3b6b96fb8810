// The CUDA edges of the allocators: device memory (cudaMalloc) and pinned host memory
// (cudaHostAlloc, or malloc + cudaHostRegister), with events from a reusable pool.
#pragma once
#if defined(GPU_BASICS_HOST_LAYER)
#error "gpu_basics/memory/cuda_backend.hpp is a CUDA header: a host-only target may not include it"
#endif

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu_basics/memory/backend.hpp"

namespace gpu_basics {

/// Events shared by the CUDA backends: created once, recycled.
class cuda_event_pool {
 public:
  /// Empty: events are created on first use.
  cuda_event_pool() = default;
  /// Destroys the events given back (those still out are their holders' to release).
  ~cuda_event_pool();
  cuda_event_pool(const cuda_event_pool&) = delete;
  cuda_event_pool& operator=(const cuda_event_pool&) = delete;
  /// A recycled (or new, timing-free) event, recorded on `s`.
  /// @throws cuda_error when the event cannot be created or recorded.
  event_handle record(stream_handle s);
  /// Whether the work `e` captured has completed.
  /// @throws cuda_error when the query reports an error.
  bool done(event_handle e);
  /// Takes `e` back for reuse.
  void release(event_handle e) noexcept;

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

/// The event half of both CUDA backends.
class cuda_backend_events : public allocator_backend {
 public:
  /// An event from the pool, recorded on `s`.
  /// @throws cuda_error when it cannot be created or recorded.
  event_handle record_event(stream_handle s) override { return events_.record(s); }
  /// Whether the work `e` captured has completed.
  /// @throws cuda_error when the query reports an error.
  bool event_done(event_handle e) override { return events_.done(e); }
  /// Gives `e` back to the pool.
  void release_event(event_handle e) noexcept override { events_.release(e); }
  /// cudaDeviceSynchronize on the current device.
  /// @throws cuda_error when the device reports an error.
  void synchronize() override;

 private:
  cuda_event_pool events_;
};

class cuda_device_backend final : public cuda_backend_events {
 public:
  /// Allocates on the current device.
  cuda_device_backend();
  /// Returns what map() still holds (nothing, when the allocator unmapped all).
  ~cuda_device_backend() override;
  cuda_device_backend(const cuda_device_backend&) = delete;
  cuda_device_backend& operator=(const cuda_device_backend&) = delete;
  /// cudaMalloc; nullptr when the device is out of memory.
  /// @throws cuda_error for any other failure.
  void* allocate(std::size_t bytes) override;
  /// cudaFree; errors are logged, not thrown.
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// {free, total} bytes of the current device (cudaMemGetInfo).
  /// @throws cuda_error when the query fails.
  std::pair<std::size_t, std::size_t> memory_info() override;
  /// "device".
  const char* name() const noexcept override { return "device"; }

  // Virtual memory through the driver API (cuMemAddressReserve, cuMemCreate, cuMemMap,
  // cuMemSetAccess), reached with cudaGetDriverEntryPointByVersion: nothing links libcuda.
  /// Whether the device supports virtual memory management and the entry points were found.
  bool supports_virtual_memory() const noexcept override;
  /// cuMemAddressReserve aligned to 2 MiB; 0 when it fails.
  std::uintptr_t reserve_address(std::size_t bytes) override;
  /// cuMemAddressFree.
  void release_address(std::uintptr_t base, std::size_t bytes) noexcept override;
  /// cuMemCreate of `bytes` on this device, cuMemMap at `ptr`, cuMemSetAccess read/write; false
  /// when the device is out of memory.
  /// @throws cuda_error for any other failure.
  bool map(std::uintptr_t ptr, std::size_t bytes) override;
  /// cuMemUnmap and cuMemRelease of one map().
  void unmap(std::uintptr_t ptr, std::size_t bytes) noexcept override;

  struct driver;

 private:
  int device_ = 0;
  std::unique_ptr<driver> driver_;
};

enum class pinning_method { host_alloc, host_register };

class cuda_pinned_backend final : public cuda_backend_events {
 public:
  /// Pins with cudaHostAlloc, or with an aligned malloc and cudaHostRegister.
  explicit cuda_pinned_backend(pinning_method m = pinning_method::host_alloc) : method_(m) {}
  /// `bytes` pinned by the chosen method; nullptr when the host cannot pin them.
  /// @throws cuda_error for any other failure.
  void* allocate(std::size_t bytes) override;
  /// cudaFreeHost, or cudaHostUnregister and free; errors are logged, not thrown.
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// {available, total} physical host memory in bytes.
  std::pair<std::size_t, std::size_t> memory_info() override;
  /// "pinned host".
  const char* name() const noexcept override { return "pinned host"; }

 private:
  pinning_method method_;
};

}  // namespace gpu_basics

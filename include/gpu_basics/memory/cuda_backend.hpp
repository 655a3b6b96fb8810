// The CUDA edges of the allocators: device memory (cudaMalloc) and pinned host memory
// (cudaHostAlloc, or malloc + cudaHostRegister), with events from a reusable pool.
#pragma once

#include <mutex>
#include <vector>

#include "gpu_basics/memory/backend.hpp"

namespace gpu_basics {

/// Events shared by the CUDA backends: created once, recycled.
class cuda_event_pool {
 public:
  cuda_event_pool() = default;
  ~cuda_event_pool();
  cuda_event_pool(const cuda_event_pool&) = delete;
  cuda_event_pool& operator=(const cuda_event_pool&) = delete;
  event_handle record(stream_handle s);
  bool done(event_handle e);
  void release(event_handle e) noexcept;

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

/// The event half of both CUDA backends.
class cuda_backend_events : public allocator_backend {
 public:
  event_handle record_event(stream_handle s) override { return events_.record(s); }
  bool event_done(event_handle e) override { return events_.done(e); }
  void release_event(event_handle e) noexcept override { events_.release(e); }
  void synchronize() override;

 private:
  cuda_event_pool events_;
};

class cuda_device_backend final : public cuda_backend_events {
 public:
  /// Allocates on the current device.
  cuda_device_backend() = default;
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  std::pair<std::size_t, std::size_t> memory_info() override;
  const char* name() const noexcept override { return "device"; }
};

enum class pinning_method { host_alloc, host_register };

class cuda_pinned_backend final : public cuda_backend_events {
 public:
  explicit cuda_pinned_backend(pinning_method m = pinning_method::host_alloc) : method_(m) {}
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  std::pair<std::size_t, std::size_t> memory_info() override;
  const char* name() const noexcept override { return "pinned host"; }

 private:
  pinning_method method_;
};

}  // namespace gpu_basics

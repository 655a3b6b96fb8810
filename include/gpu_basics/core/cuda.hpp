// Thin RAII owners of CUDA handles (stream, event, device and pinned buffers) and the check
// macros. Creation throws typed errors; destruction never throws and tolerates a runtime that is
// already shutting down. This is the CUDA edge: host-only logic does not include it.
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

/// Throws cuda_error (or out_of_memory for cudaErrorMemoryAllocation) for a failed call.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
/// Logs a failed call from a destructor or other noexcept path, and clears the error.
void log_cuda_error_nothrow(cudaError_t err, const char* call, const char* file, int line) noexcept;
/// True when the work captured by `e` has completed, false while it is pending; throws for any
/// other result. The one place that asks cudaEventQuery (cuda_event, the allocators' events);
/// poll_completed() (event_poll.hpp) is the loop over many.
[[nodiscard]] bool event_completed(cudaEvent_t e);

}  // namespace gpu_basics

#define GPU_BASICS_CUDA_TRY(call)                                                  \
  do {                                                                             \
    const cudaError_t gpu_basics_err_ = (call);                                    \
    if (gpu_basics_err_ != cudaSuccess)                                            \
      ::gpu_basics::throw_cuda_error(gpu_basics_err_, #call, __FILE__, __LINE__);  \
  } while (0)

#define GPU_BASICS_CUDA_TRY_NOTHROW(call)                                                \
  do {                                                                                   \
    const cudaError_t gpu_basics_err_ = (call);                                          \
    if (gpu_basics_err_ != cudaSuccess)                                                  \
      ::gpu_basics::log_cuda_error_nothrow(gpu_basics_err_, #call, __FILE__, __LINE__);  \
  } while (0)

namespace gpu_basics {

/// Non-owning view of a stream (the default stream when empty).
class stream_view {
 public:
  constexpr stream_view() noexcept = default;
  constexpr stream_view(cudaStream_t s) noexcept : stream_(s) {}  // NOLINT: implicit by design
  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT
  void synchronize() const { GPU_BASICS_CUDA_TRY(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_{nullptr};
};

/// An owned, non-blocking stream (does not synchronise with the legacy default stream).
class cuda_stream {
 public:
  explicit cuda_stream(unsigned flags = cudaStreamNonBlocking, int priority = 0);
  ~cuda_stream();
  cuda_stream(cuda_stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& o) noexcept;
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;

  [[nodiscard]] stream_view view() const noexcept { return stream_; }
  [[nodiscard]] cudaStream_t value() const noexcept { return stream_; }
  operator stream_view() const noexcept { return stream_; }  // NOLINT
  void synchronize() const { view().synchronize(); }

 private:
  cudaStream_t stream_{nullptr};
};

/// An owned event; timing is on unless disabled.
class cuda_event {
 public:
  explicit cuda_event(bool timing = true);
  ~cuda_event();
  cuda_event(cuda_event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  cuda_event& operator=(cuda_event&& o) noexcept;
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;

  void record(stream_view s = {}) { GPU_BASICS_CUDA_TRY(cudaEventRecord(event_, s)); }
  void synchronize() const { GPU_BASICS_CUDA_TRY(cudaEventSynchronize(event_)); }
  /// True when all work captured by the last record() has completed.
  [[nodiscard]] bool query() const;
  [[nodiscard]] cudaEvent_t value() const noexcept { return event_; }

  /// Milliseconds between two recorded, completed events.
  [[nodiscard]] static float elapsed_ms(const cuda_event& start, const cuda_event& stop);
  /// Seconds between two recorded, completed events (resolution ~0.5 us).
  [[nodiscard]] static double elapsed_s(const cuda_event& start, const cuda_event& stop) {
    return static_cast<double>(elapsed_ms(start, stop)) * 1e-3;
  }

 private:
  cudaEvent_t event_{nullptr};
};

/// Makes `device` the calling thread's current device for its scope, then restores the previous
/// one (for code that works on several GPUs).
class device_scope {
 public:
  explicit device_scope(int device);
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = 0;
};

/// Owned device memory from cudaMalloc (uninitialised).
class device_buffer {
 public:
  device_buffer() noexcept = default;
  explicit device_buffer(std::size_t bytes);
  ~device_buffer();
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  [[nodiscard]] void* data() noexcept { return ptr_; }
  [[nodiscard]] const void* data() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] T* as() noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* ptr_{nullptr};
  std::size_t size_{0};
};

/// Owned page-locked host memory from cudaHostAlloc (uninitialised).
class pinned_buffer {
 public:
  pinned_buffer() noexcept = default;
  explicit pinned_buffer(std::size_t bytes, unsigned flags = cudaHostAllocDefault);
  ~pinned_buffer();
  pinned_buffer(pinned_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  [[nodiscard]] void* data() noexcept { return ptr_; }
  [[nodiscard]] const void* data() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] T* as() noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* ptr_{nullptr};
  std::size_t size_{0};
};

}  // namespace gpu_basics

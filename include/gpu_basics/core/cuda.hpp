// Thin RAII owners of CUDA handles (stream, event, device and pinned buffers) and the check
// macros. Creation throws typed errors; destruction never throws and tolerates a runtime that is
// already shutting down. This is the CUDA edge: host-only logic does not include it.
#pragma once
#if defined(GPU_BASICS_HOST_LAYER)
#error "gpu_basics/core/cuda.hpp is a CUDA header: a host-only target may not include it"
#endif

#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

/// Turns a failed call into its typed error (clearing a non-sticky error first); never returns.
/// @throws out_of_memory for cudaErrorMemoryAllocation.
/// @throws cuda_error for any other error.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
/// Logs a failed call from a destructor or other noexcept path, and clears the error.
void log_cuda_error_nothrow(cudaError_t err, const char* call, const char* file, int line) noexcept;
/// True when the work captured by `e` has completed, false while it is pending. The one place
/// that asks cudaEventQuery (cuda_event, the allocators' events); poll_completed()
/// (event_poll.hpp) is the loop over many.
/// @throws cuda_error for any result but success or not-ready (e.g. a fault in that work).
[[nodiscard]] bool event_completed(cudaEvent_t e);

}  // namespace gpu_basics

#define GPU_BASICS_CUDA_TRY(call)                                                 \
  do {                                                                            \
    const cudaError_t gpu_basics_err_ = (call);                                   \
    if (gpu_basics_err_ != cudaSuccess)                                           \
      ::gpu_basics::throw_cuda_error(gpu_basics_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define GPU_BASICS_CUDA_TRY_NOTHROW(call)                                               \
  do {                                                                                  \
    const cudaError_t gpu_basics_err_ = (call);                                         \
    if (gpu_basics_err_ != cudaSuccess)                                                 \
      ::gpu_basics::log_cuda_error_nothrow(gpu_basics_err_, #call, __FILE__, __LINE__); \
  } while (0)

namespace gpu_basics {

/// Non-owning view of a stream (the default stream when empty).
class stream_view {
 public:
  /// The default stream.
  constexpr stream_view() noexcept = default;
  /// A view of `s` (nullptr: the default stream).
  constexpr stream_view(cudaStream_t s) noexcept : stream_(s) {}  // NOLINT: implicit by design
  /// The raw handle.
  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  /// The raw handle, so a view passes straight to CUDA calls.
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT
  /// Blocks until all work enqueued on the stream has finished.
  /// @throws cuda_error when that work or the wait failed.
  void synchronize() const { GPU_BASICS_CUDA_TRY(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_{nullptr};
};

/// An owned, non-blocking stream (does not synchronise with the legacy default stream).
class cuda_stream {
 public:
  /// Creates a stream with cudaStreamCreateWithPriority (a lower priority number runs first).
  /// @throws cuda_error when the stream cannot be created.
  explicit cuda_stream(unsigned flags = cudaStreamNonBlocking, int priority = 0);
  /// Destroys the stream; errors are logged, not thrown.
  ~cuda_stream();
  /// Takes over `o`'s stream; `o` is left empty.
  cuda_stream(cuda_stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  /// Destroys the stream held, then takes over `o`'s.
  cuda_stream& operator=(cuda_stream&& o) noexcept;
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;

  /// A non-owning view of the stream.
  [[nodiscard]] stream_view view() const noexcept { return stream_; }
  /// The raw handle.
  [[nodiscard]] cudaStream_t value() const noexcept { return stream_; }
  /// The stream as a view, so an owned stream passes where a stream_view is taken.
  operator stream_view() const noexcept { return stream_; }  // NOLINT
  /// Blocks until all work enqueued on the stream has finished.
  /// @throws cuda_error when that work or the wait failed.
  void synchronize() const { view().synchronize(); }

 private:
  cudaStream_t stream_{nullptr};
};

/// An owned event; timing is on unless disabled.
class cuda_event {
 public:
  /// Creates an event; without timing it is cheaper to record but has no elapsed time.
  /// @throws cuda_error when the event cannot be created.
  explicit cuda_event(bool timing = true);
  /// Destroys the event; errors are logged, not thrown.
  ~cuda_event();
  /// Takes over `o`'s event; `o` is left empty.
  cuda_event(cuda_event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  /// Destroys the event held, then takes over `o`'s.
  cuda_event& operator=(cuda_event&& o) noexcept;
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;

  /// Captures the work enqueued on `s` so far (the default stream when empty).
  /// @throws cuda_error when the record fails.
  void record(stream_view s = {}) { GPU_BASICS_CUDA_TRY(cudaEventRecord(event_, s)); }
  /// Blocks until the work captured by the last record() has completed.
  /// @throws cuda_error when that work or the wait failed.
  void synchronize() const { GPU_BASICS_CUDA_TRY(cudaEventSynchronize(event_)); }
  /// True when all work captured by the last record() has completed.
  /// @throws cuda_error when the query reports an error (event_completed()).
  [[nodiscard]] bool query() const;
  /// The raw handle.
  [[nodiscard]] cudaEvent_t value() const noexcept { return event_; }

  /// Milliseconds between two recorded, completed events.
  /// @throws cuda_error when either is unrecorded, not complete, or made without timing.
  [[nodiscard]] static float elapsed_ms(const cuda_event& start, const cuda_event& stop);
  /// Seconds between two recorded, completed events (resolution ~0.5 us).
  /// @throws cuda_error as elapsed_ms().
  [[nodiscard]] static double elapsed_s(const cuda_event& start, const cuda_event& stop) {
    return static_cast<double>(elapsed_ms(start, stop)) * 1e-3;
  }

 private:
  cudaEvent_t event_{nullptr};
};

/// Makes `device` the calling thread's current device for its scope, then restores the previous
/// one (for code that works on several GPUs). Costs one cudaGetDevice when `device` is current
/// already (the pluggable allocator makes one per call).
class device_scope {
 public:
  /// Makes `device` current, remembering the device that was.
  /// @throws cuda_error when `device` cannot be made current (cudaErrorInvalidDevice for a bad
  /// index).
  explicit device_scope(int device);
  /// Makes the previous device current again; errors are logged, not thrown.
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

/// Owned device memory from cudaMalloc (uninitialised).
class device_buffer {
 public:
  /// Empty: no memory, size 0.
  device_buffer() noexcept = default;
  /// `bytes` on the current device; 0 allocates nothing.
  /// @throws out_of_memory (with free and total device memory) when the device cannot supply them.
  /// @throws cuda_error for any other cudaMalloc failure.
  explicit device_buffer(std::size_t bytes);
  /// Frees the memory; errors are logged, not thrown.
  ~device_buffer();
  /// Takes over `o`'s memory; `o` is left empty.
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// Frees the memory held, then takes over `o`'s.
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  /// The memory (nullptr when empty).
  [[nodiscard]] void* data() noexcept { return ptr_; }
  [[nodiscard]] const void* data() const noexcept { return ptr_; }
  /// The memory as T* (no size or alignment check).
  template <class T>
  [[nodiscard]] T* as() noexcept {
    return static_cast<T*>(ptr_);
  }
  /// Bytes held.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* ptr_{nullptr};
  std::size_t size_{0};
};

/// Owned page-locked host memory from cudaHostAlloc (uninitialised).
class pinned_buffer {
 public:
  /// Empty: no memory, size 0.
  pinned_buffer() noexcept = default;
  /// `bytes` of pinned host memory with cudaHostAlloc `flags` (e.g. cudaHostAllocMapped); 0
  /// allocates nothing.
  /// @throws out_of_memory when they cannot be pinned.
  /// @throws cuda_error for any other cudaHostAlloc failure.
  explicit pinned_buffer(std::size_t bytes, unsigned flags = cudaHostAllocDefault);
  /// Frees the memory; errors are logged, not thrown.
  ~pinned_buffer();
  /// Takes over `o`'s memory; `o` is left empty.
  pinned_buffer(pinned_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// Frees the memory held, then takes over `o`'s.
  pinned_buffer& operator=(pinned_buffer&& o) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  /// The memory (nullptr when empty).
  [[nodiscard]] void* data() noexcept { return ptr_; }
  [[nodiscard]] const void* data() const noexcept { return ptr_; }
  /// The memory as T* (no size or alignment check).
  template <class T>
  [[nodiscard]] T* as() noexcept {
    return static_cast<T*>(ptr_);
  }
  /// Bytes held.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* ptr_{nullptr};
  std::size_t size_{0};
};

}  // namespace gpu_basics

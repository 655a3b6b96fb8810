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

/// Sole ownership of one CUDA handle (a stream, an event, an allocation): `Kind` names its type
/// (Kind::handle_type) and gives it back (Kind::release(handle), which logs errors and never
/// throws). The one owner behind cuda_stream, cuda_event, device_buffer and pinned_buffer.
template <class Kind>
class unique_handle {
 public:
  using handle_type = typename Kind::handle_type;

  /// Empty: holds nothing.
  unique_handle() noexcept = default;
  /// Takes ownership of `h` (nullptr: empty).
  explicit unique_handle(handle_type h) noexcept : h_(h) {}
  /// Releases the handle held.
  ~unique_handle() { reset(); }
  /// Takes over `o`'s handle; `o` is left empty.
  unique_handle(unique_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Releases the handle held, then takes over `o`'s.
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;

  /// The handle (nullptr when empty).
  [[nodiscard]] handle_type get() const noexcept { return h_; }
  /// Releases the handle held; empty afterwards.
  void reset() noexcept {
    if (h_) Kind::release(std::exchange(h_, nullptr));
  }

 private:
  handle_type h_{nullptr};
};

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
  // Destroying the stream logs errors, never throws; a moved-from stream is empty.

  /// A non-owning view of the stream.
  [[nodiscard]] stream_view view() const noexcept { return stream_.get(); }
  /// The raw handle.
  [[nodiscard]] cudaStream_t value() const noexcept { return stream_.get(); }
  /// The stream as a view, so an owned stream passes where a stream_view is taken.
  operator stream_view() const noexcept { return stream_.get(); }  // NOLINT
  /// Blocks until all work enqueued on the stream has finished.
  /// @throws cuda_error when that work or the wait failed.
  void synchronize() const { view().synchronize(); }

 private:
  struct kind {
    using handle_type = cudaStream_t;
    static void release(cudaStream_t s) noexcept;  // cudaStreamDestroy
  };
  unique_handle<kind> stream_;
};

/// An owned event; timing is on unless disabled.
class cuda_event {
 public:
  /// Creates an event; without timing it is cheaper to record but has no elapsed time.
  /// @throws cuda_error when the event cannot be created.
  explicit cuda_event(bool timing = true);
  // Destroying the event logs errors, never throws; a moved-from event is empty.

  /// Captures the work enqueued on `s` so far (the default stream when empty).
  /// @throws cuda_error when the record fails.
  void record(stream_view s = {}) { GPU_BASICS_CUDA_TRY(cudaEventRecord(event_.get(), s)); }
  /// Blocks until the work captured by the last record() has completed.
  /// @throws cuda_error when that work or the wait failed.
  void synchronize() const { GPU_BASICS_CUDA_TRY(cudaEventSynchronize(event_.get())); }
  /// True when all work captured by the last record() has completed.
  /// @throws cuda_error when the query reports an error (event_completed()).
  [[nodiscard]] bool query() const;
  /// The raw handle.
  [[nodiscard]] cudaEvent_t value() const noexcept { return event_.get(); }

  /// Milliseconds between two recorded, completed events.
  /// @throws cuda_error when either is unrecorded, not complete, or made without timing.
  [[nodiscard]] static float elapsed_ms(const cuda_event& start, const cuda_event& stop);
  /// Seconds between two recorded, completed events (resolution ~0.5 us).
  /// @throws cuda_error as elapsed_ms().
  [[nodiscard]] static double elapsed_s(const cuda_event& start, const cuda_event& stop) {
    return static_cast<double>(elapsed_ms(start, stop)) * 1e-3;
  }

 private:
  struct kind {
    using handle_type = cudaEvent_t;
    static void release(cudaEvent_t e) noexcept;  // cudaEventDestroy
  };
  unique_handle<kind> event_;
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

/// Owned, uninitialised memory of one kind and its size: `Memory` allocates it
/// (Memory::allocate(bytes, options...) -> void*, which throws) and frees it (as unique_handle's
/// kind). device_buffer and pinned_buffer are its two CUDA kinds.
template <class Memory>
class owned_buffer {
 public:
  /// Empty: no memory, size 0.
  owned_buffer() noexcept = default;
  /// `bytes` from Memory::allocate(bytes, options...); 0 allocates nothing.
  /// @throws what Memory::allocate throws (out_of_memory, cuda_error).
  template <class... Options,
            class = decltype(Memory::allocate(std::size_t{}, std::declval<Options>()...))>
  explicit owned_buffer(std::size_t bytes, Options... options)
      : ptr_(bytes == 0 ? nullptr : Memory::allocate(bytes, options...)), size_(bytes) {}
  // Freeing the memory logs errors, never throws.
  /// Takes over `o`'s memory; `o` is left empty.
  owned_buffer(owned_buffer&& o) noexcept
      : ptr_(std::move(o.ptr_)), size_(std::exchange(o.size_, 0)) {}
  /// Frees the memory held, then takes over `o`'s.
  owned_buffer& operator=(owned_buffer&& o) noexcept {
    ptr_ = std::move(o.ptr_);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }

  /// The memory (nullptr when empty).
  [[nodiscard]] void* data() noexcept { return ptr_.get(); }
  [[nodiscard]] const void* data() const noexcept { return ptr_.get(); }
  /// The memory as T* (no size or alignment check).
  template <class T>
  [[nodiscard]] T* as() noexcept {
    return static_cast<T*>(ptr_.get());
  }
  /// Bytes held.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  unique_handle<Memory> ptr_;
  std::size_t size_{0};
};

/// Device memory from cudaMalloc on the current device.
struct device_memory {
  using handle_type = void*;
  /// @throws out_of_memory (with free and total device memory) when the device cannot supply
  /// `bytes`.
  /// @throws cuda_error for any other cudaMalloc failure.
  [[nodiscard]] static void* allocate(std::size_t bytes);
  /// cudaFree; errors are logged.
  static void release(void* p) noexcept;
};

/// Page-locked host memory from cudaHostAlloc.
struct pinned_memory {
  using handle_type = void*;
  /// `bytes` with cudaHostAlloc `flags` (e.g. cudaHostAllocMapped).
  /// @throws out_of_memory when they cannot be pinned.
  /// @throws cuda_error for any other cudaHostAlloc failure.
  [[nodiscard]] static void* allocate(std::size_t bytes, unsigned flags = cudaHostAllocDefault);
  /// cudaFreeHost; errors are logged.
  static void release(void* p) noexcept;
};

/// Page-locked host memory in transparent huge pages: 2 MiB-aligned memory from the C heap,
/// advised MADV_HUGEPAGE (where the kernel's THP mode is `madvise`, as on many servers, memory
/// gets huge pages only when asked), written once so the kernel backs it, then pinned with
/// cudaHostRegister. Threads streaming through it miss the TLB once per 2 MiB instead of once per
/// 4 KiB page of cudaHostAlloc's memory. Without THP it is still pinned memory, in small pages.
struct huge_pinned_memory {
  using handle_type = void*;
  /// `bytes` (rounded up to 2 MiB), pinned.
  /// @throws out_of_memory when they cannot be allocated or pinned.
  /// @throws cuda_error for any other cudaHostRegister failure.
  [[nodiscard]] static void* allocate(std::size_t bytes);
  /// cudaHostUnregister, then free; errors are logged.
  static void release(void* p) noexcept;
};

/// Owned device memory from cudaMalloc (uninitialised): device_buffer(bytes).
using device_buffer = owned_buffer<device_memory>;
/// Owned page-locked host memory from cudaHostAlloc (uninitialised): pinned_buffer(bytes) or
/// pinned_buffer(bytes, flags).
using pinned_buffer = owned_buffer<pinned_memory>;
/// Owned page-locked host memory in transparent huge pages: huge_pinned_buffer(bytes).
using huge_pinned_buffer = owned_buffer<huge_pinned_memory>;

/// One unsigned long long in device memory for kernels that count with atomicAdd (bytes off the
/// pattern, wrong elements), zeroed and read back in stream order.
class device_counter {
 public:
  /// The counter on the current device, not zeroed yet (reset() does).
  /// @throws out_of_memory, cuda_error.
  device_counter() : buf_(sizeof(unsigned long long)) {}

  /// The counter in device memory, for the kernels.
  [[nodiscard]] unsigned long long* get() noexcept { return buf_.as<unsigned long long>(); }
  /// Zeroes the counter after the work enqueued on `s` so far.
  /// @throws cuda_error.
  void reset(stream_view s);
  /// The count once the work enqueued on `s` so far is done (waits for `s`).
  /// @throws cuda_error, also for a fault in that work.
  [[nodiscard]] unsigned long long read(stream_view s);

 private:
  device_buffer buf_;
};

}  // namespace gpu_basics

#include "gpu_basics/core/cuda.hpp"

#include <string>

#include <spdlog/spdlog.h>

namespace gpu_basics {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  if (err == cudaErrorMemoryAllocation)
    throw out_of_memory(std::string(call) + " failed: out of device memory (" +
                            cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line),
                        0);
  throw cuda_error(static_cast<int>(err), cudaGetErrorName(err), cudaGetErrorString(err), call,
                   file, line);
}

void log_cuda_error_nothrow(cudaError_t err, const char* call, const char* file,
                            int line) noexcept {
  (void)cudaGetLastError();
  // During process teardown the runtime may already be gone; that is not worth a message.
  if (err == cudaErrorCudartUnloading) return;
  try {
    spdlog::warn("{} failed: {} ({}) at {}:{}", call, cudaGetErrorName(err),
                 cudaGetErrorString(err), file, line);
  } catch (...) {
  }
}

device_scope::device_scope(int device) : device_(device) {
  GPU_BASICS_CUDA_TRY(cudaGetDevice(&previous_));
  if (previous_ != device) GPU_BASICS_CUDA_TRY(cudaSetDevice(device));
}
device_scope::~device_scope() {
  if (previous_ != device_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaSetDevice(previous_));
}

cuda_stream::cuda_stream(unsigned flags, int priority) {
  GPU_BASICS_CUDA_TRY(cudaStreamCreateWithPriority(&stream_, flags, priority));
}
cuda_stream::~cuda_stream() {
  if (stream_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream_));
}
cuda_stream& cuda_stream::operator=(cuda_stream&& o) noexcept {
  if (this != &o) {
    if (stream_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream_));
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

cuda_event::cuda_event(bool timing) {
  GPU_BASICS_CUDA_TRY(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
cuda_event::~cuda_event() {
  if (event_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventDestroy(event_));
}
cuda_event& cuda_event::operator=(cuda_event&& o) noexcept {
  if (this != &o) {
    if (event_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventDestroy(event_));
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}
bool event_completed(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) return false;
  throw_cuda_error(r, "cudaEventQuery", __FILE__, __LINE__);
}

bool cuda_event::query() const {
  return event_completed(event_);
}
float cuda_event::elapsed_ms(const cuda_event& start, const cuda_event& stop) {
  float ms = 0;
  GPU_BASICS_CUDA_TRY(cudaEventElapsedTime(&ms, start.event_, stop.event_));
  return ms;
}

device_buffer::device_buffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                            std::to_string(free_b) + " of " + std::to_string(total_b) + " free)",
                        bytes);
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
}
device_buffer::~device_buffer() {
  if (ptr_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaFree(ptr_));
}
device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaFree(ptr_));
    ptr_ = std::exchange(o.ptr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

pinned_buffer::pinned_buffer(std::size_t bytes, unsigned flags) : size_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaHostAlloc(&ptr_, bytes, flags);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory",
                        bytes);
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaHostAlloc", __FILE__, __LINE__);
}
pinned_buffer::~pinned_buffer() {
  if (ptr_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaFreeHost(ptr_));
}
pinned_buffer& pinned_buffer::operator=(pinned_buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaFreeHost(ptr_));
    ptr_ = std::exchange(o.ptr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace gpu_basics

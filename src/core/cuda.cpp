#include "gpu_basics/core/cuda.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

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
  cudaStream_t s = nullptr;
  GPU_BASICS_CUDA_TRY(cudaStreamCreateWithPriority(&s, flags, priority));
  stream_ = unique_handle<kind>(s);
}
void cuda_stream::kind::release(cudaStream_t s) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaStreamDestroy(s));
}

cuda_event::cuda_event(bool timing) {
  cudaEvent_t e = nullptr;
  GPU_BASICS_CUDA_TRY(
      cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  event_ = unique_handle<kind>(e);
}
void cuda_event::kind::release(cudaEvent_t e) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventDestroy(e));
}
bool event_completed(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) return false;
  throw_cuda_error(r, "cudaEventQuery", __FILE__, __LINE__);
}

bool cuda_event::query() const {
  return event_completed(event_.get());
}
float cuda_event::elapsed_ms(const cuda_event& start, const cuda_event& stop) {
  float ms = 0;
  GPU_BASICS_CUDA_TRY(cudaEventElapsedTime(&ms, start.event_.get(), stop.event_.get()));
  return ms;
}

void* device_memory::allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                            std::to_string(free_b) + " of " + std::to_string(total_b) + " free)",
                        bytes);
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
  return p;
}
void device_memory::release(void* p) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaFree(p));
}

void* pinned_memory::allocate(std::size_t bytes, unsigned flags) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, flags);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory",
                        bytes);
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaHostAlloc", __FILE__, __LINE__);
  return p;
}
void pinned_memory::release(void* p) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaFreeHost(p));
}

void* huge_pinned_memory::allocate(std::size_t bytes) {
  constexpr std::size_t kHuge = 2u << 20;
  const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p)
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes of host memory",
                        bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without THP the pages stay small
#endif
  std::memset(p, 0, rounded);  // fault the pages in now, huge where the kernel has them
  const cudaError_t e = cudaHostRegister(p, rounded, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    std::free(p);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory("cannot pin " + std::to_string(bytes) + " bytes of host memory", bytes);
    }
    throw_cuda_error(e, "cudaHostRegister", __FILE__, __LINE__);
  }
  return p;
}
void huge_pinned_memory::release(void* p) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaHostUnregister(p));
  std::free(p);
}

void device_counter::reset(stream_view s) {
  GPU_BASICS_CUDA_TRY(cudaMemsetAsync(get(), 0, sizeof(unsigned long long), s));
}
unsigned long long device_counter::read(stream_view s) {
  unsigned long long v = 0;
  GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(&v, get(), sizeof v, cudaMemcpyDeviceToHost, s));
  s.synchronize();
  return v;
}

}  // namespace gpu_basics

#include "gpu_basics/memory/cuda_backend.hpp"

#include <unistd.h>

#include <cstdlib>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics {

cuda_event_pool::~cuda_event_pool() {
  for (void* e : free_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
}

event_handle cuda_event_pool::record(stream_handle s) {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      e = static_cast<cudaEvent_t>(free_.back());
      free_.pop_back();
    }
  }
  if (!e) GPU_BASICS_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  GPU_BASICS_CUDA_TRY(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(s)));
  return e;
}

bool cuda_event_pool::done(event_handle e) {
  return event_completed(static_cast<cudaEvent_t>(e));
}

void cuda_event_pool::release(event_handle e) noexcept {
  std::lock_guard lock(mutex_);
  try {
    free_.push_back(e);
  } catch (...) {
    GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
  }
}

void* cuda_device_backend::allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
  return p;
}

void cuda_device_backend::deallocate(void* p, std::size_t) noexcept {
  GPU_BASICS_CUDA_TRY_NOTHROW(cudaFree(p));
}

void cuda_backend_events::synchronize() {
  GPU_BASICS_CUDA_TRY(cudaDeviceSynchronize());
}

std::pair<std::size_t, std::size_t> cuda_device_backend::memory_info() {
  std::size_t f = 0, t = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&f, &t));
  return {f, t};
}

void* cuda_pinned_backend::allocate(std::size_t bytes) {
  void* p = nullptr;
  if (method_ == pinning_method::host_alloc) {
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (e != cudaSuccess) throw_cuda_error(e, "cudaHostAlloc", __FILE__, __LINE__);
    return p;
  }
  p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!p) return nullptr;
  const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    std::free(p);
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation || e == cudaErrorHostMemoryAlreadyRegistered) return nullptr;
    throw_cuda_error(e, "cudaHostRegister", __FILE__, __LINE__);
  }
  return p;
}

void cuda_pinned_backend::deallocate(void* p, std::size_t) noexcept {
  if (method_ == pinning_method::host_alloc) {
    GPU_BASICS_CUDA_TRY_NOTHROW(cudaFreeHost(p));
  } else {
    GPU_BASICS_CUDA_TRY_NOTHROW(cudaHostUnregister(p));
    std::free(p);
  }
}

std::pair<std::size_t, std::size_t> cuda_pinned_backend::memory_info() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES),
             page = sysconf(_SC_PAGESIZE);
  return {static_cast<std::size_t>(pages) * static_cast<std::size_t>(page),
          static_cast<std::size_t>(total) * static_cast<std::size_t>(page)};
}

}  // namespace gpu_basics

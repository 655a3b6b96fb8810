#include "gpu_basics/memory/cuda_backend.hpp"

#include <unistd.h>

#include <cuda.h>

#include <cstdlib>
#include <string>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"

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

// ---- the driver's virtual memory API, found at run time --------------------------------------

struct cuda_device_backend::driver {
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  bool usable = false;
  std::mutex mutex;
  std::map<std::uintptr_t, CUmemGenericAllocationHandle> handles;  // by mapped address
};

namespace {

template <class F>
bool entry_point(const char* name, F& f) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    return false;
  }
  f = reinterpret_cast<F>(p);
  return true;
}

[[noreturn]] void throw_driver_error(CUresult r, const char* call, int line) {
  throw cuda_error(static_cast<int>(r), "CUresult " + std::to_string(static_cast<int>(r)),
                   "CUDA driver call failed", call, __FILE__, line);
}

}  // namespace

cuda_device_backend::cuda_device_backend() : driver_(std::make_unique<driver>()) {
  if (cudaGetDevice(&device_) != cudaSuccess) {
    (void)cudaGetLastError();
    return;  // no usable device: allocate() reports it
  }
  driver& d = *driver_;
  const bool found =
      entry_point("cuMemAddressReserve", d.reserve) &&
      entry_point("cuMemAddressFree", d.address_free) && entry_point("cuMemCreate", d.create) &&
      entry_point("cuMemRelease", d.release) && entry_point("cuMemMap", d.map) &&
      entry_point("cuMemUnmap", d.unmap) && entry_point("cuMemSetAccess", d.set_access) &&
      entry_point("cuDeviceGetAttribute", d.attribute);
  int vmm = 0;
  d.usable = found &&
             d.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_) ==
                 CUDA_SUCCESS &&
             vmm != 0;
}

// Mappings still held belong to allocations the allocator leaked to their users: they stay.
cuda_device_backend::~cuda_device_backend() = default;

bool cuda_device_backend::supports_virtual_memory() const noexcept {
  return driver_ && driver_->usable;
}

std::uintptr_t cuda_device_backend::reserve_address(std::size_t bytes) {
  if (!supports_virtual_memory()) return 0;
  CUdeviceptr p = 0;
  const CUresult r = driver_->reserve(&p, bytes, std::size_t{2} << 20, 0, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE) return 0;
  if (r != CUDA_SUCCESS) throw_driver_error(r, "cuMemAddressReserve", __LINE__);
  return static_cast<std::uintptr_t>(p);
}

void cuda_device_backend::release_address(std::uintptr_t base, std::size_t bytes) noexcept {
  if (supports_virtual_memory()) (void)driver_->address_free(static_cast<CUdeviceptr>(base), bytes);
}

bool cuda_device_backend::map(std::uintptr_t ptr, std::size_t bytes) {
  if (!supports_virtual_memory()) return false;
  driver& d = *driver_;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemGenericAllocationHandle h{};
  CUresult r = d.create(&h, bytes, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
  if (r != CUDA_SUCCESS) throw_driver_error(r, "cuMemCreate", __LINE__);
  const auto p = static_cast<CUdeviceptr>(ptr);
  r = d.map(p, bytes, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    (void)d.release(h);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
    throw_driver_error(r, "cuMemMap", __LINE__);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d.set_access(p, bytes, &access, 1);
  if (r != CUDA_SUCCESS) {
    (void)d.unmap(p, bytes);
    (void)d.release(h);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
    throw_driver_error(r, "cuMemSetAccess", __LINE__);
  }
  std::lock_guard lock(d.mutex);
  d.handles[ptr] = h;
  return true;
}

void cuda_device_backend::unmap(std::uintptr_t ptr, std::size_t bytes) noexcept {
  if (!supports_virtual_memory()) return;
  driver& d = *driver_;
  CUmemGenericAllocationHandle h{};
  {
    std::lock_guard lock(d.mutex);
    const auto it = d.handles.find(ptr);
    if (it == d.handles.end()) return;
    h = it->second;
    d.handles.erase(it);
  }
  // No synchronisation here: the allocator unmaps only pages the GPU is done with (after an
  // event it recorded, or one device synchronisation for a whole release; see Note [Deferred
  // page release] in caching_allocator.cpp).
  (void)d.unmap(static_cast<CUdeviceptr>(ptr), bytes);
  (void)d.release(h);
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

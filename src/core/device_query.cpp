// The device queries of device_info.hpp: the CUDA runtime and NVML (the CUDA edge of core).
#include <array>
#include <cstdio>

#include <cuda_runtime_api.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"

namespace gpu_basics {

int visible_device_count() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return count;
  (void)cudaGetLastError();
  switch (e) {
    case cudaSuccess:
    case cudaErrorNoDevice:
      throw no_device_error(
          "no NVIDIA GPU visible: no CUDA-capable device is detected"
          " (check CUDA_VISIBLE_DEVICES and the driver)");
    case cudaErrorInsufficientDriver: {
      int runtime = 0;
      (void)cudaRuntimeGetVersion(&runtime);
      throw no_device_error("no NVIDIA GPU visible: CUDA driver not found (or older than CUDA " +
                            cuda_version_string(runtime) + " requires)");
    }
    default:
      throw no_device_error(std::string("no NVIDIA GPU visible: ") + cudaGetErrorName(e) + ": " +
                            cudaGetErrorString(e));
  }
}

namespace {
template <class T>
void take(std::optional<T>& dst, const reading<T>& r) {
  if (r.ok()) dst = r.value;
}
}  // namespace

device_info query_device(int index, const nvml* nv) {
  const int count = visible_device_count();
  if (index < 0 || index >= count)
    throw no_device_error("device " + std::to_string(index) +
                          " does not exist: " + std::to_string(count) +
                          " GPU(s) visible (indices 0.." + std::to_string(count - 1) + ")");
  cudaDeviceProp p{};
  GPU_BASICS_CUDA_TRY(cudaGetDeviceProperties(&p, index));
  device_info d;
  d.index = index;
  d.name = p.name;
  std::array<char, 32> bus{};
  GPU_BASICS_CUDA_TRY(cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), index));
  d.pci_bus_id = bus.data();
  d.compute_capability_major = p.major;
  d.compute_capability_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.l2_cache_bytes = static_cast<std::uint64_t>(p.l2CacheSize);
  d.total_memory_bytes = p.totalGlobalMem;
  d.copy_engines = p.asyncEngineCount;
  d.ecc_enabled = p.ECCEnabled != 0;
  int v = 0;
  GPU_BASICS_CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, index));
  d.max_sm_clock_mhz = v / 1000;
  GPU_BASICS_CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, index));
  d.max_memory_clock_mhz = v / 1000;
  GPU_BASICS_CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, index));
  d.memory_bus_width_bits = v;
  GPU_BASICS_CUDA_TRY(cudaRuntimeGetVersion(&d.runtime_version));
  GPU_BASICS_CUDA_TRY(cudaDriverGetVersion(&d.driver_api_version));
  {
    int previous = 0;
    GPU_BASICS_CUDA_TRY(cudaGetDevice(&previous));
    GPU_BASICS_CUDA_TRY(cudaSetDevice(index));
    std::size_t free_b = 0, total_b = 0;
    GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    d.free_memory_bytes = free_b;
    GPU_BASICS_CUDA_TRY(cudaSetDevice(previous));
  }
  if (nv) {
    take(d.driver_version, nv->driver_version());
    const auto dev = nv->device_by_pci_bus_id(d.pci_bus_id);
    if (dev.ok()) {
      take(d.pcie_generation_current, nv->pcie_link_generation(dev.value));
      take(d.pcie_generation_max, nv->pcie_link_generation_max(dev.value));
      take(d.pcie_width_current, nv->pcie_link_width(dev.value));
      take(d.pcie_width_max, nv->pcie_link_width_max(dev.value));
      take(d.sm_clock_current_mhz, nv->clock_mhz(dev.value, nvml_clock::sm));
      take(d.memory_clock_current_mhz, nv->clock_mhz(dev.value, nvml_clock::memory));
      take(d.power_limit_mw, nv->power_limit_mw(dev.value));
      take(d.temperature_c, nv->temperature_c(dev.value));
    }
  }
  return d;
}

std::vector<device_info> query_devices(const nvml* nv) {
  std::vector<device_info> out;
  const int n = visible_device_count();
  out.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(query_device(i, nv));
  return out;
}

}  // namespace gpu_basics

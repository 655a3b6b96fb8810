#include "gpu_basics/core/device_info.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/nvml.hpp"

namespace gpu_basics {

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

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

std::optional<double> device_link_bytes_per_s(const device_info& d) {
  if (!d.pcie_generation_max || !d.pcie_width_max) return std::nullopt;
  return pcie_link_bytes_per_s(*d.pcie_generation_max, *d.pcie_width_max);
}

namespace {
/// The members a results file keeps as they are, under their own names: to_json and from_json
/// both walk this one list. The rest (versions, capability, power limit) are written as text or
/// in other units, next to it.
template <class Device, class Visit>
void plain_members(Device& d, Visit&& visit) {
  visit("index", d.index);
  visit("name", d.name);
  visit("pci_bus_id", d.pci_bus_id);
  visit("sm_count", d.sm_count);
  visit("l2_cache_bytes", d.l2_cache_bytes);
  visit("total_memory_bytes", d.total_memory_bytes);
  visit("free_memory_bytes", d.free_memory_bytes);
  visit("memory_bus_width_bits", d.memory_bus_width_bits);
  visit("copy_engines", d.copy_engines);
  visit("max_sm_clock_mhz", d.max_sm_clock_mhz);
  visit("max_memory_clock_mhz", d.max_memory_clock_mhz);
  visit("ecc_enabled", d.ecc_enabled);
  visit("driver_version", d.driver_version);
  visit("pcie_generation_current", d.pcie_generation_current);
  visit("pcie_generation_max", d.pcie_generation_max);
  visit("pcie_width_current", d.pcie_width_current);
  visit("pcie_width_max", d.pcie_width_max);
  visit("sm_clock_current_mhz", d.sm_clock_current_mhz);
  visit("memory_clock_current_mhz", d.memory_clock_current_mhz);
  visit("temperature_c", d.temperature_c);
}

template <class T>
nlohmann::json json_of(const T& v) {
  return v;
}
template <class T>
nlohmann::json json_of(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

/// "13.0" -> 13000, "9.0" -> {9, 0}: the inverse of cuda_version_string and the capability text.
std::pair<int, int> parse_major_minor(const std::string& s) {
  int major = 0, minor = 0;
  if (std::sscanf(s.c_str(), "%d.%d", &major, &minor) < 1) return {0, 0};
  return {major, minor};
}

/// What a member holds when set: T, or the T of an optional<T>.
template <class T>
struct held {
  using type = T;
};
template <class T>
struct held<std::optional<T>> {
  using type = T;
};

/// `key`'s value into `out`; a key that is missing or null leaves `out` as it is.
template <class T>
void read(const nlohmann::json& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->get<typename held<T>::type>();
}
}  // namespace

void to_json(nlohmann::json& j, const device_info& d) {
  j = nlohmann::json::object();
  plain_members(d, [&](const char* key, const auto& v) { j[key] = json_of(v); });
  j["compute_capability"] =
      std::to_string(d.compute_capability_major) + "." + std::to_string(d.compute_capability_minor);
  j["cuda_runtime_version"] = cuda_version_string(d.runtime_version);
  j["cuda_driver_api_version"] = cuda_version_string(d.driver_api_version);
  j["pcie_link_bytes_per_s"] = json_of(device_link_bytes_per_s(d));
  j["power_limit_w"] =
      d.power_limit_mw ? nlohmann::json(*d.power_limit_mw / 1000.0) : nlohmann::json(nullptr);
  const auto sheet = find_datasheet(d.name);
  j["datasheet_hbm_bytes_per_s"] =
      sheet ? nlohmann::json(sheet->hbm_bytes_per_s) : nlohmann::json(nullptr);
}

void from_json(const nlohmann::json& j, device_info& d) {
  d = device_info{};
  plain_members(d, [&](const char* key, auto& v) { read(j, key, v); });
  if (const auto it = j.find("compute_capability"); it != j.end() && it->is_string())
    std::tie(d.compute_capability_major, d.compute_capability_minor) =
        parse_major_minor(it->get<std::string>());
  const auto version = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return 0;
    const auto [major, minor] = parse_major_minor(it->get<std::string>());
    return major * 1000 + minor * 10;
  };
  d.runtime_version = version("cuda_runtime_version");
  d.driver_api_version = version("cuda_driver_api_version");
  if (const auto it = j.find("power_limit_w"); it != j.end() && it->is_number())
    d.power_limit_mw = static_cast<unsigned>(std::llround(it->get<double>() * 1000.0));
}

}  // namespace gpu_basics

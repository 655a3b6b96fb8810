// What a GPU is: properties from the CUDA runtime and, where NVML is available, the PCIe link,
// clocks and power limit. The struct is host-only; querying needs the CUDA runtime.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpu_basics {

class nvml;

struct device_info {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  std::uint64_t l2_cache_bytes = 0;
  std::uint64_t total_memory_bytes = 0;
  std::uint64_t free_memory_bytes = 0;
  int memory_bus_width_bits = 0;
  int copy_engines = 0;  // asyncEngineCount
  int max_sm_clock_mhz = 0;
  int max_memory_clock_mhz = 0;
  bool ecc_enabled = false;
  int runtime_version = 0;  // 13000 = 13.0
  int driver_api_version = 0;
  // From NVML; empty where NVML is missing or the metric is not supported.
  std::optional<std::string> driver_version;
  std::optional<unsigned> pcie_generation_current;
  std::optional<unsigned> pcie_generation_max;
  std::optional<unsigned> pcie_width_current;
  std::optional<unsigned> pcie_width_max;
  std::optional<unsigned> sm_clock_current_mhz;
  std::optional<unsigned> memory_clock_current_mhz;
  std::optional<unsigned> power_limit_mw;
  std::optional<unsigned> temperature_c;

  bool operator==(const device_info&) const = default;
};

/// "13.0" from 13000.
[[nodiscard]] std::string cuda_version_string(int version);

/// Number of visible CUDA devices.
/// @throws no_device_error with a one-line reason when there is no driver or no device
/// ("no NVIDIA GPU visible: ...").
[[nodiscard]] int visible_device_count();

/// Properties of one device; NVML fields filled when `nv` is non-null.
/// @throws no_device_error for an index that does not exist, or with no driver or device.
/// @throws cuda_error when a property query fails.
[[nodiscard]] device_info query_device(int index, const nvml* nv);

/// Every visible device.
/// @throws no_device_error when there is no driver or no device.
/// @throws cuda_error when a property query fails.
[[nodiscard]] std::vector<device_info> query_devices(const nvml* nv);

/// Theoretical PCIe rate of the device's link in bytes/s (max generation/width), if known.
[[nodiscard]] std::optional<double> device_link_bytes_per_s(const device_info& d);

/// The JSON of a device in results files (versions as "13.0", power limit in W, plus the derived
/// link rate and datasheet figures).
void to_json(nlohmann::json& j, const device_info& d);
/// Reads what to_json wrote (derived fields are ignored); missing keys keep their defaults.
/// @throws json_path_error (core/json.hpp) on a value of the wrong type.
void from_json(const nlohmann::json& j, device_info& d);

}  // namespace gpu_basics

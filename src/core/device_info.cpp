#include "gpu_basics/core/device_info.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/hardware.hpp"

namespace gpu_basics {

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::optional<double> device_link_bytes_per_s(const device_info& d) {
  if (!d.pcie_generation_max || !d.pcie_width_max) return std::nullopt;
  return pcie_link_bytes_per_s(*d.pcie_generation_max, *d.pcie_width_max);
}

namespace {
template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

void to_json(nlohmann::json& j, const device_info& d) {
  const auto link = device_link_bytes_per_s(d);
  const auto sheet = find_datasheet(d.name);
  j = nlohmann::json{
      {"index", d.index},
      {"name", d.name},
      {"pci_bus_id", d.pci_bus_id},
      {"compute_capability", std::to_string(d.compute_capability_major) + "." +
                                 std::to_string(d.compute_capability_minor)},
      {"sm_count", d.sm_count},
      {"l2_cache_bytes", d.l2_cache_bytes},
      {"total_memory_bytes", d.total_memory_bytes},
      {"free_memory_bytes", d.free_memory_bytes},
      {"memory_bus_width_bits", d.memory_bus_width_bits},
      {"copy_engines", d.copy_engines},
      {"max_sm_clock_mhz", d.max_sm_clock_mhz},
      {"max_memory_clock_mhz", d.max_memory_clock_mhz},
      {"ecc_enabled", d.ecc_enabled},
      {"cuda_runtime_version", cuda_version_string(d.runtime_version)},
      {"cuda_driver_api_version", cuda_version_string(d.driver_api_version)},
      {"driver_version", opt(d.driver_version)},
      {"pcie_generation_current", opt(d.pcie_generation_current)},
      {"pcie_generation_max", opt(d.pcie_generation_max)},
      {"pcie_width_current", opt(d.pcie_width_current)},
      {"pcie_width_max", opt(d.pcie_width_max)},
      {"pcie_link_bytes_per_s", opt(link)},
      {"sm_clock_current_mhz", opt(d.sm_clock_current_mhz)},
      {"memory_clock_current_mhz", opt(d.memory_clock_current_mhz)},
      {"power_limit_w",
       d.power_limit_mw ? nlohmann::json(*d.power_limit_mw / 1000.0) : nlohmann::json(nullptr)},
      {"temperature_c", opt(d.temperature_c)},
      {"datasheet_hbm_bytes_per_s",
       sheet ? nlohmann::json(sheet->hbm_bytes_per_s) : nlohmann::json(nullptr)},
  };
}

namespace {
/// "13.0" -> 13000, "9.0" -> {9, 0}: the inverse of cuda_version_string and the capability text.
std::pair<int, int> parse_major_minor(const std::string& s) {
  int major = 0, minor = 0;
  if (std::sscanf(s.c_str(), "%d.%d", &major, &minor) < 1) return {0, 0};
  return {major, minor};
}

template <class T>
void read_opt(const nlohmann::json& j, const char* key, std::optional<T>& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    out.reset();
  else
    out = it->get<T>();
}

template <class T>
void read(const nlohmann::json& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->get<T>();
}
}  // namespace

void from_json(const nlohmann::json& j, device_info& d) {
  d = device_info{};
  read(j, "index", d.index);
  read(j, "name", d.name);
  read(j, "pci_bus_id", d.pci_bus_id);
  if (const auto it = j.find("compute_capability"); it != j.end() && it->is_string())
    std::tie(d.compute_capability_major, d.compute_capability_minor) =
        parse_major_minor(it->get<std::string>());
  read(j, "sm_count", d.sm_count);
  read(j, "l2_cache_bytes", d.l2_cache_bytes);
  read(j, "total_memory_bytes", d.total_memory_bytes);
  read(j, "free_memory_bytes", d.free_memory_bytes);
  read(j, "memory_bus_width_bits", d.memory_bus_width_bits);
  read(j, "copy_engines", d.copy_engines);
  read(j, "max_sm_clock_mhz", d.max_sm_clock_mhz);
  read(j, "max_memory_clock_mhz", d.max_memory_clock_mhz);
  read(j, "ecc_enabled", d.ecc_enabled);
  const auto version = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return 0;
    const auto [major, minor] = parse_major_minor(it->get<std::string>());
    return major * 1000 + minor * 10;
  };
  d.runtime_version = version("cuda_runtime_version");
  d.driver_api_version = version("cuda_driver_api_version");
  read_opt(j, "driver_version", d.driver_version);
  read_opt(j, "pcie_generation_current", d.pcie_generation_current);
  read_opt(j, "pcie_generation_max", d.pcie_generation_max);
  read_opt(j, "pcie_width_current", d.pcie_width_current);
  read_opt(j, "pcie_width_max", d.pcie_width_max);
  read_opt(j, "sm_clock_current_mhz", d.sm_clock_current_mhz);
  read_opt(j, "memory_clock_current_mhz", d.memory_clock_current_mhz);
  if (const auto it = j.find("power_limit_w"); it != j.end() && it->is_number())
    d.power_limit_mw = static_cast<unsigned>(std::llround(it->get<double>() * 1000.0));
  read_opt(j, "temperature_c", d.temperature_c);
}

}  // namespace gpu_basics

#include "gpu_basics/core/device_info.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
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
  if (it == j.end() || it->is_null()) return;
  typename held<T>::type v{};
  read_member(j, key, v);
  out = std::move(v);
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
  require_json_object(j);
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

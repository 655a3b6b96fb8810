// The environment block every result carries: host, GPU(s), versions and the effective config,
// so a figure can be traced back to where and how it was measured. Host-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/device_info.hpp"

namespace gpu_basics {

struct host_info {
  std::string hostname;
  std::string os;  // "Linux 6.1.0 x86_64"
  std::string cpu_model;
  unsigned logical_cores = 0;
  std::uint64_t memory_bytes = 0;
};

/// This machine's name, OS, CPU model, logical cores and memory; what cannot be read stays empty.
[[nodiscard]] host_info capture_host_info();

/// MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping), or 0 when
/// it cannot be read.
[[nodiscard]] std::uint64_t host_available_bytes();

/// The version of this build, from the repository's VERSION file: "0.2.0".
[[nodiscard]] std::string_view gpu_basics_version() noexcept;
/// The git revision the binary was built from ("unknown" outside git).
[[nodiscard]] std::string_view gpu_basics_git_revision() noexcept;

/// ISO-8601 UTC time, e.g. "2026-12-02T14:03:00Z".
[[nodiscard]] std::string utc_timestamp();

/// {"gpu_basics": {...}, "timestamp_utc", "host": {...}, "gpus": [...], "nvml": ..., "config": ...}
[[nodiscard]] nlohmann::json environment_json(const config& cfg,
                                              const std::vector<device_info>& gpus,
                                              const std::string& nvml_status);

}  // namespace gpu_basics

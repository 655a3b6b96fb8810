#include "gpu_basics/core/environment.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

namespace gpu_basics {

std::uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

host_info capture_host_info() {
  host_info h;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) h.hostname = name;
  utsname u{};
  if (uname(&u) == 0) h.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto p = line.find(':');
      if (p != std::string::npos) h.cpu_model = line.substr(p + 2);
      break;
    }
  }
  h.logical_cores = std::thread::hardware_concurrency();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    h.memory_bytes = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  return h;
}

std::string utc_timestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json environment_json(const config& cfg, const std::vector<device_info>& gpus,
                                const std::string& nvml_status) {
  const host_info h = capture_host_info();
  nlohmann::json g = nlohmann::json::array();
  for (const auto& d : gpus) g.push_back(d);
  return {
      {"gpu_basics",
       {{"version", gpu_basics_version()}, {"git_revision", gpu_basics_git_revision()}}},
      {"timestamp_utc", utc_timestamp()},
      {"host",
       {{"hostname", h.hostname},
        {"os", h.os},
        {"cpu_model", h.cpu_model},
        {"logical_cores", h.logical_cores},
        {"memory_bytes", h.memory_bytes}}},
      {"gpus", g},
      {"nvml", nvml_status},
      {"config", cfg},
  };
}

}  // namespace gpu_basics

// Named-region timing like torch.profiler's key averages: each region records its GPU time
// (from CUDA events) and host time; the registry aggregates calls, total, mean, min and max.
// The registry is host-only; gpu_timing (gpu_timer.hpp) feeds it from events.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gpu_basics {

struct region_stats {
  std::string name;
  std::size_t calls = 0;
  double gpu_total_s = 0, gpu_min_s = 0, gpu_max_s = 0;
  double host_total_s = 0;
  /// GPU seconds per call (0 before any call).
  [[nodiscard]] double gpu_mean_s() const noexcept {
    return calls ? gpu_total_s / static_cast<double>(calls) : 0;
  }
  /// Host seconds per call (0 before any call).
  [[nodiscard]] double host_mean_s() const noexcept {
    return calls ? host_total_s / static_cast<double>(calls) : 0;
  }
};

class timing_registry {
 public:
  /// Adds one call of `name` (thread-safe).
  void record(const std::string& name, double gpu_s, double host_s);
  /// Regions sorted by total GPU time, largest first.
  [[nodiscard]] std::vector<region_stats> regions() const;
  /// Forgets every region.
  void clear();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, region_stats> regions_;
};

}  // namespace gpu_basics

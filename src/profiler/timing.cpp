#include "gpu_basics/profiler/timing.hpp"

#include <algorithm>

namespace gpu_basics {

void timing_registry::record(const std::string& name, double gpu_s, double host_s) {
  std::lock_guard lock(mutex_);
  auto& r = regions_[name];
  if (r.calls == 0) {
    r.name = name;
    r.gpu_min_s = r.gpu_max_s = gpu_s;
  }
  ++r.calls;
  r.gpu_total_s += gpu_s;
  r.gpu_min_s = std::min(r.gpu_min_s, gpu_s);
  r.gpu_max_s = std::max(r.gpu_max_s, gpu_s);
  r.host_total_s += host_s;
}

std::vector<region_stats> timing_registry::regions() const {
  std::vector<region_stats> out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [k, v] : regions_) out.push_back(v);
  }
  std::stable_sort(out.begin(), out.end(), [](const region_stats& a, const region_stats& b) {
    return a.gpu_total_s > b.gpu_total_s;
  });
  return out;
}

void timing_registry::clear() {
  std::lock_guard lock(mutex_);
  regions_.clear();
}

}  // namespace gpu_basics

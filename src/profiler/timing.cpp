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
  std::stable_sort(out.begin(), out.end(),
                   [](const region_stats& a, const region_stats& b) { return a.gpu_total_s > b.gpu_total_s; });
  return out;
}

table timing_registry::key_averages(const std::string& id) const {
  table t;
  t.id = id;
  t.title = "Key averages (GPU time from CUDA events, host time from the host clock)";
  t.columns = {{"name", "region"},
               {"calls", "calls"},
               {"gpu_total_s", "GPU total (ms)", 1e3, 3},
               {"gpu_mean_s", "GPU mean (us)", 1e6, 1},
               {"gpu_min_s", "GPU min (us)", 1e6, 1},
               {"gpu_max_s", "GPU max (us)", 1e6, 1},
               {"host_mean_s", "host mean (us)", 1e6, 1}};
  for (const auto& r : regions())
    t.add_row({r.name, static_cast<std::int64_t>(r.calls), r.gpu_total_s, r.gpu_mean_s(), r.gpu_min_s,
               r.gpu_max_s, r.host_mean_s()});
  return t;
}

void timing_registry::clear() {
  std::lock_guard lock(mutex_);
  regions_.clear();
}

}  // namespace gpu_basics

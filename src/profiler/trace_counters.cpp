#include "gpu_basics/profiler/trace_counters.hpp"

#include <string>

namespace gpu_basics {

std::size_t add_sample_counters(trace_writer& out, const std::vector<gpu_sample>& samples,
                                std::uint64_t origin_ns, std::int64_t pid) {
  std::size_t n = 0;
  double energy0 = -1;
  for (const auto& s : samples) {
    const double ts_us = (s.time_s * 1e9 - static_cast<double>(origin_ns)) * 1e-3;
    for (std::size_t k = 0; k < kGpuMetricCount; ++k) {
      const auto m = static_cast<gpu_metric>(k);
      const auto& r = s.values[k];
      // A bitmask and a constant are no series to plot.
      if (!r.ok() || m == gpu_metric::clock_event_reasons || m == gpu_metric::memory_total_bytes)
        continue;
      if (m == gpu_metric::energy_j) {
        if (energy0 < 0) energy0 = r.value;
        out.counter("energy_used_j", ts_us, pid, r.value - energy0);
      } else {
        out.counter(std::string(metric_name(m)), ts_us, pid, r.value);
      }
      ++n;
    }
  }
  return n;
}

std::size_t add_memory_counters(trace_writer& out, const std::vector<memory_usage_point>& points,
                                std::uint64_t origin_ns, std::int64_t pid) {
  std::size_t n = 0;
  const memory_usage_point* before = nullptr;
  for (const auto& p : points) {
    const double ts_us = (static_cast<double>(p.time_ns) - static_cast<double>(origin_ns)) * 1e-3;
    if (!before || p.allocated_bytes != before->allocated_bytes) {
      out.counter("allocated_bytes", ts_us, pid, static_cast<double>(p.allocated_bytes));
      ++n;
    }
    if (!before || p.reserved_bytes != before->reserved_bytes) {
      out.counter("reserved_bytes", ts_us, pid, static_cast<double>(p.reserved_bytes));
      ++n;
    }
    before = &p;
  }
  return n;
}

}  // namespace gpu_basics

#include "gpu_basics/profiler/trace_counters.hpp"

#include <string>

namespace gpu_basics {

std::size_t add_sample_counters(trace_writer& out, const std::vector<gpu_sample>& samples, std::uint64_t origin_ns,
                                std::int64_t pid) {
  std::size_t n = 0;
  double energy0 = -1;
  for (const auto& s : samples) {
    const double ts_us = (s.time_s * 1e9 - static_cast<double>(origin_ns)) * 1e-3;
    for (std::size_t k = 0; k < kGpuMetricCount; ++k) {
      const auto m = static_cast<gpu_metric>(k);
      const auto& r = s.values[k];
      // A bitmask and a constant are no series to plot.
      if (!r.ok() || m == gpu_metric::clock_event_reasons || m == gpu_metric::memory_total_bytes) continue;
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

std::size_t add_allocator_counters(trace_writer& out, const std::vector<history_event>& history,
                                   std::uint64_t origin_ns, std::int64_t pid, std::int64_t allocated_before,
                                   std::int64_t reserved_before) {
  std::int64_t allocated = allocated_before, reserved = reserved_before;
  std::size_t n = 0;
  for (const auto& e : history) {
    const double ts_us = (static_cast<double>(e.time_ns) - static_cast<double>(origin_ns)) * 1e-3;
    const auto bytes = static_cast<std::int64_t>(e.bytes);
    switch (e.kind) {
      case history_kind::alloc: allocated += bytes; break;
      case history_kind::free: allocated -= bytes; break;
      case history_kind::segment_alloc: reserved += bytes; break;
      case history_kind::segment_free: reserved -= bytes; break;
      case history_kind::oom: continue;
    }
    const bool alloc_side = e.kind == history_kind::alloc || e.kind == history_kind::free;
    out.counter(alloc_side ? "allocated_bytes" : "reserved_bytes", ts_us, pid,
                static_cast<double>(alloc_side ? allocated : reserved));
    ++n;
  }
  return n;
}

}  // namespace gpu_basics

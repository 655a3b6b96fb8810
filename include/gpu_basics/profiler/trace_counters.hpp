// Counter tracks for a trace: NVML metrics from the sampler, and a memory pool's allocated and
// reserved bytes (memory_usage_point: the caching allocator's memory_usage() turns its history
// into them). All on the host clock (core/clock.hpp). Host-only.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_basics/core/memory_usage.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"

namespace gpu_basics {

/// One counter series per metric with values (utilization, memory used, power, temperature,
/// clocks; energy as joules used since the first reading), on process `pid`. Returns the number
/// of counter events.
std::size_t add_sample_counters(trace_writer& out, const std::vector<gpu_sample>& samples,
                                std::uint64_t origin_ns, std::int64_t pid);

/// The "allocated_bytes" and "reserved_bytes" series on process `pid`: both at the first point,
/// then each series where its value changed. Returns the number of counter events.
std::size_t add_memory_counters(trace_writer& out, const std::vector<memory_usage_point>& points,
                                std::uint64_t origin_ns, std::int64_t pid);

}  // namespace gpu_basics

// Counter tracks for a trace: NVML metrics from the sampler, and the caching allocator's
// allocated and reserved bytes rebuilt from its history. Both on trace_clock_ns() (steady clock).
// Host-only.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"

namespace gpu_basics {

/// One counter series per metric with values (utilization, memory used, power, temperature,
/// clocks; energy as joules used since the first reading), on process `pid`. Returns the number
/// of counter events.
std::size_t add_sample_counters(trace_writer& out, const std::vector<gpu_sample>& samples, std::uint64_t origin_ns,
                                std::int64_t pid);

/// "allocated_bytes" and "reserved_bytes" after each history event (alloc/free move the first,
/// segment_alloc/segment_free the second), starting from the given values. Returns the number of
/// counter events.
std::size_t add_allocator_counters(trace_writer& out, const std::vector<history_event>& history,
                                   std::uint64_t origin_ns, std::int64_t pid, std::int64_t allocated_before = 0,
                                   std::int64_t reserved_before = 0);

}  // namespace gpu_basics

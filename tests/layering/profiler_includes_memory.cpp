// Layering probe, must NOT compile: profiler and memory are siblings (the trace's memory counters
// take core's memory_usage_point, not the allocator's history). profiler's own header and core's
// are found; memory's is not.
#include "gpu_basics/core/memory_usage.hpp"
#include "gpu_basics/profiler/trace_counters.hpp"

// The wrong way:
#include "gpu_basics/memory/caching_allocator.hpp"

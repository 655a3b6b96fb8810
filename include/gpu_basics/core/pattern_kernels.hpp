// The data pattern (pattern.hpp) on the GPU: fill and check kernels over device or mapped pinned
// host memory, enqueued on a stream. Every measured copy is verified with them; the profiler's
// workloads fill their inputs with them. This is a CUDA edge: host-only code includes pattern.hpp.
#pragma once
#if defined(GPU_BASICS_HOST_LAYER)
#error "gpu_basics/core/pattern_kernels.hpp is a CUDA header: a host-only target may not include it"
#endif

#include <cstddef>
#include <cstdint>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics {

/// Writes the pattern (pattern.hpp) over [0, bytes) of a device-accessible buffer.
/// @throws cuda_error when a launch fails.
void enqueue_fill_pattern(void* dst, std::size_t bytes, std::uint32_t seed, stream_view s);
/// Writes zeros (the poison before each measured copy, so a copy that did nothing fails).
/// @throws cuda_error when a launch fails.
void enqueue_fill_zero(void* dst, std::size_t bytes, stream_view s);
/// Adds the number of bytes of `src` that differ from the pattern to *counter (device memory).
/// @throws cuda_error when a launch fails.
void enqueue_count_mismatches(const void* src, std::size_t bytes, std::uint32_t seed,
                              unsigned long long* counter, stream_view s);

}  // namespace gpu_basics

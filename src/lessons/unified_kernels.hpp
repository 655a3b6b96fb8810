// The unified lesson's kernels (unified_kernels.cu): a sparse reader, a copy that repeats inside
// one launch (so a working set that fits in L2 is not launch-bound), and a kernel that holds a
// stream for a while. Each reader checks what it reads against the pattern (core/pattern.hpp).
// Private to the module's CUDA edge.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics::lessons::unified_kernels {

/// Reads one `line_bytes` line in every `stride` lines of [0, bytes) of a buffer holding the
/// pattern of `seed` from its start; adds the words that differ to *wrong.
/// @throws cuda_error when the launch fails.
void enqueue_sparse_read(const void* src, std::size_t bytes, int line_bytes, int stride,
                         std::uint32_t seed, unsigned long long* wrong, stream_view s);

/// Copies `bytes` (a multiple of 16) from src to dst `repeats` times in one launch, loads and
/// stores going to L2 (not L1), so the copy is served by L2 when both fit.
/// @throws cuda_error when the launch fails.
void enqueue_repeated_copy(const void* src, void* dst, std::size_t bytes, int repeats,
                           stream_view s);

/// One thread spins for about `cycles` SM clock cycles: the stream is busy meanwhile.
/// @throws cuda_error when the launch fails.
void enqueue_spin(long long cycles, stream_view s);

/// The SM clock rate in Hz of the current device, for turning seconds into spin cycles.
/// @throws cuda_error.
[[nodiscard]] double sm_clock_hz();

}  // namespace gpu_basics::lessons::unified_kernels

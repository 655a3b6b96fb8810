// Internal: the kernels behind nccl.cpp's fill and check (nccl_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpu_basics::detail {

cudaError_t enqueue_fill_collective_input(float* dst, std::uint64_t count, int rank,
                                          cudaStream_t s);
/// Adds to *bad the number of elements of `out` that differ from collective_expected_value.
cudaError_t enqueue_check_collective_output(const float* out, std::uint64_t count, int op,
                                            int ranks, int rank, std::uint64_t count_per_rank,
                                            unsigned long long* bad, cudaStream_t s);

}  // namespace gpu_basics::detail

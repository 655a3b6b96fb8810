// Fill and check kernels for the NCCL collectives (C++17: see the top-level CMakeLists).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu_basics/transfer/collective_values.h"
#include "nccl_kernels.hpp"

namespace gpu_basics::detail {

namespace {
__global__ void fill_input_kernel(float* dst, std::uint64_t count, int rank) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
    dst[i] = collective_input_value(rank, i);
}

__global__ void check_output_kernel(const float* out, std::uint64_t count, int op, int ranks,
                                    int rank, std::uint64_t count_per_rank,
                                    unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
    mine += out[i] != collective_expected_value(op, ranks, rank, i, count_per_rank);
  if (mine) atomicAdd(bad, mine);
}

unsigned grid_for(std::uint64_t n) {
  const std::uint64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}
}  // namespace

cudaError_t enqueue_fill_collective_input(float* dst, std::uint64_t count, int rank,
                                          cudaStream_t s) {
  fill_input_kernel<<<grid_for(count), 256, 0, s>>>(dst, count, rank);
  return cudaGetLastError();
}

cudaError_t enqueue_check_collective_output(const float* out, std::uint64_t count, int op,
                                            int ranks, int rank, std::uint64_t count_per_rank,
                                            unsigned long long* bad, cudaStream_t s) {
  check_output_kernel<<<grid_for(count), 256, 0, s>>>(out, count, op, ranks, rank, count_per_rank,
                                                      bad);
  return cudaGetLastError();
}

}  // namespace gpu_basics::detail

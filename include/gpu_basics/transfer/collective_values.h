/* The values a collective check uses, shared by host code and CUDA kernels (C++17 and C++20):
   small integers stored in float, so sums over many ranks are exact. */
#pragma once

#include <cstdint>

#include "gpu_basics/core/host_device.hpp"

namespace gpu_basics::detail {

GPU_BASICS_HD inline float collective_input_value(int rank, std::uint64_t i) {
  return static_cast<float>((i * 7 + static_cast<std::uint64_t>(rank) * 13) % 251);
}

/* op: 0 all-reduce, 1 all-gather, 2 reduce-scatter (the order of gpu_basics::collective). */
GPU_BASICS_HD inline float collective_expected_value(int op, int ranks, int rank, std::uint64_t i,
                                                     std::uint64_t count_per_rank) {
  if (op == 1)
    return collective_input_value(static_cast<int>(i / count_per_rank), i % count_per_rank);
  const std::uint64_t at = op == 2 ? static_cast<std::uint64_t>(rank) * count_per_rank + i : i;
  float s = 0;
  for (int r = 0; r < ranks; ++r) s += collective_input_value(r, at);
  return s;
}

}  // namespace gpu_basics::detail

#pragma once

#include <gtest/gtest.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"

/// Skips the test, with the reason, where no GPU is visible.
#define SKIP_WITHOUT_GPU()                             \
  do {                                                 \
    try {                                              \
      (void)::gpu_basics::visible_device_count();      \
    } catch (const ::gpu_basics::no_device_error& e) { \
      GTEST_SKIP() << e.what();                        \
    }                                                  \
  } while (0)

namespace gpu_basics::testing {

/// Bytes of a device-accessible buffer that differ from the pattern of `seed`, checked on `s`.
inline unsigned long long device_mismatches(const void* p, std::size_t bytes, std::uint32_t seed,
                                            stream_view s = {}) {
  device_buffer counter(sizeof(unsigned long long));
  GPU_BASICS_CUDA_TRY(cudaMemsetAsync(counter.data(), 0, counter.size(), s.value()));
  enqueue_count_mismatches(p, bytes, seed, counter.as<unsigned long long>(), s);
  unsigned long long v = 0;
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(&v, counter.data(), sizeof(v), cudaMemcpyDeviceToHost, s.value()));
  GPU_BASICS_CUDA_TRY(cudaStreamSynchronize(s.value()));
  return v;
}

}  // namespace gpu_basics::testing

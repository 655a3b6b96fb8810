#include "gpu_basics/transfer/pipeline.hpp"

#include "gpu_basics/core/pattern.hpp"

namespace gpu_basics {

namespace {
constexpr std::uint32_t kA = 1664525u, kC = 1013904223u;

__global__ void lcg_checksum_kernel(const std::uint32_t* data, std::size_t words,
                                    unsigned iterations, unsigned long long* checksum) {
  unsigned long long sum = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < words;
       i += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t x = data[i];
    for (unsigned k = 0; k < iterations; ++k) x = x * kA + kC;
    sum += x;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(checksum, sum);
}
}  // namespace

void enqueue_lcg_checksum(const void* data, std::size_t bytes, unsigned iterations,
                          unsigned long long* checksum, stream_view s) {
  const std::size_t words = bytes / 4;
  int sms = 132;
  (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const std::size_t want = (words + 255) / 256;
  const int blocks =
      static_cast<int>(want < static_cast<std::size_t>(sms) * 8 ? (want ? want : 1) : sms * 8);
  lcg_checksum_kernel<<<blocks, 256, 0, s>>>(static_cast<const std::uint32_t*>(data), words,
                                             iterations, checksum);
  GPU_BASICS_CUDA_TRY(cudaGetLastError());
}

unsigned long long lcg_checksum_of_pattern(std::size_t bytes, std::uint32_t seed,
                                           unsigned iterations) {
  // x_k = A^k x + C (A^(k-1) + ... + 1), mod 2^32.
  std::uint32_t a = 1, c = 0;
  for (unsigned k = 0; k < iterations; ++k) {
    a = a * kA;
    c = c * kA + kC;
  }
  unsigned long long sum = 0;
  const std::size_t words = bytes / 4;
  for (std::size_t i = 0; i < words; ++i)
    sum += static_cast<std::uint32_t>(a * pattern_word(seed, i) + c);
  return sum;
}

prefetch_pipeline::prefetch_pipeline(std::size_t batch_bytes, std::size_t depth)
    : batch_bytes_(batch_bytes) {
  GPU_BASICS_EXPECTS(depth >= 1, "a pipeline needs at least one buffer");
  GPU_BASICS_EXPECTS(batch_bytes > 0, "empty batches");
  for (std::size_t i = 0; i < depth; ++i) {
    buffers_.emplace_back(batch_bytes);
    copy_done_.emplace_back(false);
    compute_done_.emplace_back(false);
  }
}

pipeline_run prefetch_pipeline::run(const std::vector<const void*>& b, const compute_fn& f) {
  return execute(b, f, false);
}
pipeline_run prefetch_pipeline::run_serial(const std::vector<const void*>& b, const compute_fn& f) {
  return execute(b, f, true);
}

}  // namespace gpu_basics

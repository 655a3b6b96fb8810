// The device half of the data pattern (pattern.hpp): fill, zero and check kernels and their
// launchers. Only kernels live here; the pattern itself is host/device code in pattern.hpp.
#include "gpu_basics/core/pattern_kernels.hpp"

#include "gpu_basics/core/pattern.hpp"

namespace gpu_basics {

namespace {

constexpr int kThreads = 256;

int grid_for(std::size_t items) {
  const std::size_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 132 * 16 ? (blocks == 0 ? 1 : blocks) : 132 * 16);
}

__global__ void fill_pattern_kernel(std::uint32_t* dst, std::size_t words, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < words;
       i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = pattern_word(seed, i);
}

__global__ void fill_tail_kernel(std::uint8_t* base, std::size_t begin, std::size_t end,
                                 std::uint32_t seed, bool zero) {
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    base[i] = zero ? 0 : pattern_byte(seed, i);
}

__global__ void fill_zero_kernel(uint4* dst, std::size_t vecs) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < vecs;
       i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = make_uint4(0, 0, 0, 0);
}

__device__ unsigned popc_bytes_differ(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t x = a ^ b;
  unsigned n = 0;
  for (int k = 0; k < 4; ++k) n += ((x >> (8 * k)) & 0xffu) != 0;
  return n;
}

__global__ void count_mismatch_kernel(const std::uint32_t* src, std::size_t words,
                                      std::uint32_t seed, unsigned long long* counter) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < words;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::uint32_t w = src[i];
    const std::uint32_t want = pattern_word(seed, i);
    if (w != want) bad += popc_bytes_differ(w, want);
  }
  // Warp-reduce, then one atomic per warp.
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(counter, bad);
}

__global__ void count_tail_kernel(const std::uint8_t* base, std::size_t begin, std::size_t end,
                                  std::uint32_t seed, unsigned long long* counter) {
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    if (base[i] != pattern_byte(seed, i)) atomicAdd(counter, 1ull);
}

void check_launch() {
  GPU_BASICS_CUDA_TRY(cudaGetLastError());
}

}  // namespace

void enqueue_fill_pattern(void* dst, std::size_t bytes, std::uint32_t seed, stream_view s) {
  const std::size_t words = bytes / 4;
  if (words) {
    fill_pattern_kernel<<<grid_for(words), kThreads, 0, s>>>(static_cast<std::uint32_t*>(dst),
                                                             words, seed);
    check_launch();
  }
  if (bytes % 4) {
    fill_tail_kernel<<<1, 32, 0, s>>>(static_cast<std::uint8_t*>(dst), words * 4, bytes, seed,
                                      false);
    check_launch();
  }
}

void enqueue_fill_zero(void* dst, std::size_t bytes, stream_view s) {
  // cudaHostAlloc and cudaMalloc return 256-byte aligned memory; 16-byte stores cover the bulk.
  const std::size_t vecs = bytes / 16;
  if (vecs) {
    fill_zero_kernel<<<grid_for(vecs), kThreads, 0, s>>>(static_cast<uint4*>(dst), vecs);
    check_launch();
  }
  if (bytes % 16) {
    fill_tail_kernel<<<1, 32, 0, s>>>(static_cast<std::uint8_t*>(dst), vecs * 16, bytes, 0, true);
    check_launch();
  }
}

void enqueue_count_mismatches(const void* src, std::size_t bytes, std::uint32_t seed,
                              unsigned long long* counter, stream_view s) {
  const std::size_t words = bytes / 4;
  if (words) {
    count_mismatch_kernel<<<grid_for(words), kThreads, 0, s>>>(
        static_cast<const std::uint32_t*>(src), words, seed, counter);
    check_launch();
  }
  if (bytes % 4) {
    count_tail_kernel<<<1, 32, 0, s>>>(static_cast<const std::uint8_t*>(src), words * 4, bytes,
                                       seed, counter);
    check_launch();
  }
}

}  // namespace gpu_basics

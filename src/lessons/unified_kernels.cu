// The unified lesson's kernels and their launchers (unified_kernels.hpp).
#include "gpu_basics/core/pattern.hpp"
#include "unified_kernels.hpp"

namespace gpu_basics::lessons::unified_kernels {

namespace {

constexpr int kThreads = 256;

void check_launch() {
  GPU_BASICS_CUDA_TRY(cudaGetLastError());
}

/// Warp w reads line w * stride: lane l reads word l of it (a line of 32 words: 128 bytes), or
/// fewer lanes for shorter lines.
__global__ void sparse_read_kernel(const std::uint32_t* src, std::size_t lines, int words_per_line,
                                   int stride, std::uint32_t seed, unsigned long long* wrong) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::size_t warps_per_grid = std::size_t{gridDim.x} * (blockDim.x / 32);
  unsigned long long bad = 0;
  for (std::size_t w = (blockIdx.x * std::size_t{blockDim.x} + threadIdx.x) / 32; w < lines;
       w += warps_per_grid) {
    if (lane >= words_per_line) continue;
    const std::size_t word = w * static_cast<std::size_t>(stride) * words_per_line + lane;
    if (src[word] != pattern_word(seed, word)) ++bad;
  }
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
  if (lane == 0 && bad) atomicAdd(wrong, bad);
}

__global__ void repeated_copy_kernel(const uint4* src, uint4* dst, std::size_t vecs, int repeats) {
  const std::size_t step = std::size_t{gridDim.x} * blockDim.x;
  for (int r = 0; r < repeats; ++r)
    for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < vecs; i += step)
      __stcg(dst + i, __ldcg(src + i));
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

void enqueue_sparse_read(const void* src, std::size_t bytes, int line_bytes, int stride,
                         std::uint32_t seed, unsigned long long* wrong, stream_view s) {
  const int words_per_line = line_bytes / 4;
  const std::size_t lines =
      bytes / (static_cast<std::size_t>(line_bytes) * static_cast<std::size_t>(stride));
  if (lines == 0 || words_per_line <= 0 || words_per_line > 32) return;
  const std::size_t blocks = (lines * 32 + kThreads - 1) / kThreads;
  sparse_read_kernel<<<static_cast<unsigned>(blocks < 132 * 16 ? blocks : 132 * 16), kThreads, 0,
                       s>>>(static_cast<const std::uint32_t*>(src), lines, words_per_line, stride,
                            seed, wrong);
  check_launch();
}

void enqueue_repeated_copy(const void* src, void* dst, std::size_t bytes, int repeats,
                           stream_view s) {
  const std::size_t vecs = bytes / sizeof(uint4);
  if (vecs == 0) return;
  const std::size_t blocks = (vecs + kThreads - 1) / kThreads;
  repeated_copy_kernel<<<static_cast<unsigned>(blocks < 132 * 8 ? blocks : 132 * 8), kThreads, 0,
                         s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), vecs,
                              repeats);
  check_launch();
}

void enqueue_spin(long long cycles, stream_view s) {
  spin_kernel<<<1, 1, 0, s>>>(cycles);
  check_launch();
}

double sm_clock_hz() {
  int device = 0, khz = 0;
  GPU_BASICS_CUDA_TRY(cudaGetDevice(&device));
  GPU_BASICS_CUDA_TRY(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  return static_cast<double>(khz) * 1e3;
}

}  // namespace gpu_basics::lessons::unified_kernels

// The smallest useful kernel for launch-overhead benchmarks: one thread adds one to a counter,
// so the host can check that every launch ran.
#include <cuda_runtime.h>

namespace {
__global__ void tiny_kernel(unsigned* counter) {
  atomicAdd(counter, 1u);
}
}  // namespace

cudaError_t launch_tiny_kernel(unsigned* counter, cudaStream_t s) {
  tiny_kernel<<<1, 1, 0, s>>>(counter);
  return cudaGetLastError();
}

#include "gpu_basics/transfer/kernels.hpp"

#include <cstring>

namespace gpu_basics {

namespace {

__global__ void spin_kernel(volatile int* flags, unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (flags[0] == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      flags[1] = 1;
      break;
    }
  }
}

}  // namespace

stream_blocker::stream_blocker(double timeout_s)
    : flags_(2 * sizeof(int), cudaHostAllocMapped), timeout_s_(timeout_s) {
  std::memset(flags_.data(), 0, flags_.size());
}

stream_blocker::~stream_blocker() {
  release();
}

void stream_blocker::block(stream_view s) {
  auto* f = static_cast<volatile int*>(flags_.data());
  f[0] = 0;
  f[1] = 0;
  int* dev = nullptr;
  GPU_BASICS_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), flags_.data(), 0));
  spin_kernel<<<1, 1, 0, s>>>(dev, static_cast<unsigned long long>(timeout_s_ * 1e9));
  GPU_BASICS_CUDA_TRY(cudaGetLastError());
}

void stream_blocker::release() noexcept {
  if (flags_.data()) static_cast<volatile int*>(flags_.data())[0] = 1;
}

bool stream_blocker::timed_out() const noexcept {
  return flags_.data() && static_cast<const volatile int*>(flags_.data())[1] != 0;
}

}  // namespace gpu_basics

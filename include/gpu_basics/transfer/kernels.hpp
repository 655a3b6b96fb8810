// Device helpers for measuring copies: a blocking kernel that holds a stream while timed work is
// enqueued. The pattern fill and check kernels are core's (core/pattern_kernels.hpp).
#pragma once
#if defined(GPU_BASICS_HOST_LAYER)
#error "gpu_basics/transfer/kernels.hpp is a CUDA header: a host-only target may not include it"
#endif

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics {

/// Holds a stream with a kernel that spins until release() (or a timeout, so a failing host
/// never hangs the GPU). Work enqueued behind it starts together when it is released, so its
/// timing excludes the host's enqueue cost. Destruction releases it.
/// Lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) can make the
/// first launch of a kernel wait for the device to go idle: launch every kernel once before
/// blocking, or set CUDA_MODULE_LOADING=EAGER (the gpu-basics CLI does).
class stream_blocker {
 public:
  /// Pins the mapped flags the kernel polls; a block() spins at most `timeout_s` seconds.
  /// @throws out_of_memory when the flags cannot be pinned; cuda_error.
  explicit stream_blocker(double timeout_s = 20.0);
  /// Releases a block still holding its stream.
  ~stream_blocker();
  stream_blocker(const stream_blocker&) = delete;
  stream_blocker& operator=(const stream_blocker&) = delete;

  /// Launches the spinning kernel on `s`: work enqueued on `s` after it waits for release().
  /// @throws cuda_error when the launch fails.
  void block(stream_view s);
  /// Lets the spinning kernel finish, so its stream runs on.
  void release() noexcept;
  /// True if the last block timed out before release (its timings are then not trustworthy).
  [[nodiscard]] bool timed_out() const noexcept;

 private:
  pinned_buffer flags_;  // [0] = release flag, [1] = timed-out flag, written by the kernel
  double timeout_s_;
};

}  // namespace gpu_basics

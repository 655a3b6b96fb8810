// A prefetching pipeline for training/inference loops: batch i+1 is copied host -> device on a
// copy stream while batch i is computed on a compute stream, over `depth` device buffers
// (2 = double-buffering, 3 = triple). Events order it both ways (pipeline_schedule.hpp).
// Sources are pinned host batches; the compute step is the caller's (it enqueues on the stream
// it is given). Each batch's copy and compute are timed with events for a timeline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics {

struct batch_timeline {
  double copy_start_s = 0, copy_end_s = 0, compute_start_s = 0,
         compute_end_s = 0;  // from run start
};

struct pipeline_run {
  double total_s = 0;
  std::vector<batch_timeline> batches;
};

class prefetch_pipeline {
 public:
  using compute_fn =
      std::function<void(stream_view s, const void* device_batch, std::size_t batch)>;

  /// depth device buffers of batch_bytes each; depth 1 still overlaps nothing but is legal.
  /// @throws logic_error for depth 0 or 0 bytes; out_of_memory, cuda_error.
  prefetch_pipeline(std::size_t batch_bytes, std::size_t depth);

  /// Copies host_batches[i] (pinned, batch_bytes each) and runs compute on each, pipelined.
  /// @throws cuda_error when a copy, event or stream call fails; what `compute` throws.
  pipeline_run run(const std::vector<const void*>& host_batches, const compute_fn& compute);
  /// The baseline: copy then compute, one stream, one buffer.
  /// @throws cuda_error when a copy, event or stream call fails; what `compute` throws.
  pipeline_run run_serial(const std::vector<const void*>& host_batches, const compute_fn& compute);

  /// Device buffers in the ring.
  [[nodiscard]] std::size_t depth() const noexcept { return buffers_.size(); }
  /// Bytes per batch.
  [[nodiscard]] std::size_t batch_bytes() const noexcept { return batch_bytes_; }

  /// Test-only: drop the waits that keep a buffer from being overwritten while it is computed.
  void set_wait_for_release_for_testing(bool wait) noexcept { wait_for_release_ = wait; }

 private:
  pipeline_run execute(const std::vector<const void*>& host_batches, const compute_fn& compute,
                       bool serial);

  std::size_t batch_bytes_;
  std::vector<device_buffer> buffers_;
  cuda_stream copy_stream_, compute_stream_;
  std::vector<cuda_event> copy_done_, compute_done_;  // per buffer, no timing
  bool wait_for_release_ = true;
};

/// The demo compute step: every 32-bit word goes through `iterations` steps of a linear
/// congruential generator and the results are summed into *checksum (device memory, added to).
/// Work per element scales with `iterations`, so compute time can be set against copy time.
/// @throws cuda_error when the launch fails.
void enqueue_lcg_checksum(const void* data, std::size_t bytes, unsigned iterations,
                          unsigned long long* checksum, stream_view s);
/// The same checksum on the host for the pattern of `seed` (pattern.hpp), in closed form: k LCG
/// steps are one affine map, so the reference costs one multiply-add per word.
[[nodiscard]] unsigned long long lcg_checksum_of_pattern(std::size_t bytes, std::uint32_t seed,
                                                         unsigned iterations);

}  // namespace gpu_basics

// The dependency schedule of a prefetch (double/triple-buffering) pipeline, as host-only logic:
// batch i is copied into buffer i % depth on the copy stream and computed on the compute
// stream. Compute i waits for copy i; the copy that overwrites a buffer waits for the compute
// that still reads it (batch i - depth). An executor turns the steps into stream operations:
// CUDA streams and events on a GPU, a simulation in tests.
#pragma once

#include <cstddef>
#include <vector>

namespace gpu_basics {

/// What a pipeline step does. Steps are issued in order; waits name the batch whose event they
/// wait for.
enum class pipeline_op {
  copy_wait_compute,  // the copy stream waits until compute(batch) is done (buffer released)
  copy,               // copy batch into buffer on the copy stream, then mark copy(batch) done
  compute_wait_copy,  // the compute stream waits until copy(batch) is done
  compute,  // compute batch from buffer on the compute stream, then mark compute(batch) done
};

struct pipeline_step {
  pipeline_op op;
  std::size_t batch;
  std::size_t buffer;
  bool operator==(const pipeline_step&) const = default;
};

/// The steps for `batches` batches over `depth` buffers (depth >= 1). With
/// wait_for_release = false the copy-waits-compute steps are left out: the race the schedule
/// exists to prevent, for tests that must see it fail.
/// @throws logic_error for depth 0.
[[nodiscard]] std::vector<pipeline_step> prefetch_schedule(std::size_t batches, std::size_t depth,
                                                           bool wait_for_release = true);

/// Serial: copy then compute on one stream, batch after batch, one buffer.
[[nodiscard]] std::vector<pipeline_step> serial_schedule(std::size_t batches);

/// Ideal pipelined time: the first copy, then the slower of copy and compute per batch, then
/// the last compute: copy + compute + (batches - 1) * max(copy, compute).
[[nodiscard]] double ideal_pipeline_seconds(std::size_t batches, double copy_s, double compute_s);

/// One batch of a simulated schedule: when its copy and compute started and ended.
struct simulated_batch {
  double copy_start, copy_end, compute_start, compute_end;
};
/// Simulates a schedule on two in-order streams (copy, compute) with fixed durations; returns
/// per batch {copy start, copy end, compute start, compute end}. For serial schedules both ops
/// run on one stream.
/// @throws std::out_of_range when a step names a batch >= `batches`.
[[nodiscard]] std::vector<simulated_batch> simulate_schedule(
    const std::vector<pipeline_step>& steps, std::size_t batches, double copy_s, double compute_s,
    bool one_stream);

}  // namespace gpu_basics

// The double-buffering part of `gpu-basics transfer`: copy batch i+1 while computing batch i, for
// several compute/copy ratios; serial vs double vs triple (vs a deeper ring) vs ideal, verified
// checksums, the per-batch timelines, and the transfer lesson's --trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/trace_output.hpp"

namespace gpu_basics::lessons {

/// One batch of a pipeline run, seconds from the run's start (CUDA events).
struct pipeline_batch {
  double copy_start_s = 0;
  double copy_end_s = 0;
  double compute_start_s = 0;
  double compute_end_s = 0;

  bool operator==(const pipeline_batch&) const = default;
};
GPU_BASICS_JSON(pipeline_batch, copy_start_s, copy_end_s, compute_start_s, compute_end_s)

/// One way of running the batches: "serial" (depth 0: copy then compute on one stream),
/// "double" (2 buffers), "triple" (3), "depth N" (N > 3 when configured).
struct pipeline_mode_run {
  std::string name;
  int depth = 0;
  double total_s = 0;  // median over the repetitions
  std::vector<pipeline_batch>
      batches;  // the repetition closest to the median; empty from schema 1 tables alone
  std::optional<sampling_outcome> sampling;  // of the totals; absent before the rule

  bool operator==(const pipeline_mode_run&) const = default;
};
GPU_BASICS_JSON(pipeline_mode_run, name, depth, total_s, batches, sampling)

/// One compute/copy ratio: the compute made to last `compute_to_copy` x one batch's copy.
struct double_buffer_ratio {
  double compute_to_copy = 0;                   // the configured target ratio
  std::optional<std::uint64_t> lcg_iterations;  // LCG steps per 32-bit word in the compute kernel
  double compute_s = 0;                         // one batch's compute (median)
  std::vector<pipeline_mode_run> modes;         // serial, double, triple[, depth N]

  bool operator==(const double_buffer_ratio&) const = default;
};
GPU_BASICS_JSON(double_buffer_ratio, compute_to_copy, lcg_iterations, compute_s, modes)

struct double_buffer_result {
  std::uint64_t batch_bytes = 0;
  std::uint64_t batches = 0;
  std::optional<int> depth;        // transfer.double_buffer.depth; nullopt when not kept
  std::optional<int> repetitions;  // the most runs per mode and ratio (the median is kept)
  double copy_s = 0;               // one batch's H2D copy, pinned (median)
  std::vector<double_buffer_ratio> ratios;
  std::optional<std::string> timeline_trace_path;  // double_buffer_trace.json
  std::optional<double> timeline_trace_ratio;      // the ratio traced there (closest to 1)
  std::optional<trace_summary> trace;              // --trace

  bool operator==(const double_buffer_result&) const = default;
};
GPU_BASICS_JSON(double_buffer_result, batch_bytes, batches, depth, repetitions, copy_s, ratios,
                timeline_trace_path, timeline_trace_ratio, trace)

/// The "double_buffer" notes (and the trace's).
[[nodiscard]] std::vector<note> explain_double_buffer(const double_buffer_result& r,
                                                      const device_facts& facts);
/// The "double_buffer" table, then the "trace" table when traced.
[[nodiscard]] std::vector<presentation::table> present_double_buffer(const double_buffer_result& r);
/// From a schema-1 block: the "double_buffer" table and extra.double_buffer (timelines).
/// nullopt when the block has no "double_buffer" table.
/// @throws json_path_error (a format_error) naming the key path in the block of what cannot be
/// read.
[[nodiscard]] std::optional<double_buffer_result> double_buffer_from_v1(
    const nlohmann::json& block);

}  // namespace gpu_basics::lessons

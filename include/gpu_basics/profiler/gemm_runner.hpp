// cuBLASLt GEMM (D = A^T B, column-major, "TN") in fp16, bf16, tf32 or fp32 on random normal
// inputs: the heuristic's candidate algorithms are timed and the fastest kept per
// (precision, shape); results of a small case are checked against a CPU reference.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/profiler/gemm.hpp"

namespace gpu_basics {

struct gemm_result {
  gemm_precision precision = gemm_precision::bf16;
  gemm_shape shape;
  int candidates = 0;  // algorithms the heuristic offered
  int chosen = -1;     // index of the fastest
  std::vector<double> candidate_median_s;
  std::vector<double> seconds;  // timed runs of the chosen algorithm
  summary flops_per_s;
  sampling_outcome sampling;  // how many runs the stopping rule took and why it stopped
};

class gemm_runner {
 public:
  /// A cuBLASLt handle and a `workspace_bytes` workspace; autotuning times at most
  /// `max_candidates` algorithms.
  /// @throws cuda_error when cuBLASLt cannot start; out_of_memory for the workspace.
  explicit gemm_runner(std::size_t workspace_bytes = 64u << 20, int max_candidates = 8);
  /// Frees the handle, the workspace and the operands.
  ~gemm_runner();
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;

  /// Autotunes (once per precision and shape), then times `iterations` runs after `warmup`.
  /// @throws gpu_basics::error when cuBLASLt offers no algorithm or none runs; cuda_error (a CUDA
  /// or cuBLASLt status), out_of_memory; logic_error for iterations < 1.
  gemm_result run(gemm_precision p, gemm_shape s, int warmup, int iterations, stream_view st);
  /// Autotunes as above, then times runs by `rule` (core/sampling.hpp): rule.warmup untimed, then
  /// until the median is precise or a bound is reached.
  /// @throws as run() above; logic_error for a rule the sampler refuses.
  gemm_result run(gemm_precision p, gemm_shape s, const stopping_rule& rule, stream_view st);
  /// Runs an n x n x n GEMM with the tuned algorithm and returns its max relative error against
  /// a double-precision CPU product of the same inputs.
  /// @throws gpu_basics::error, cuda_error, out_of_memory as run().
  double check(gemm_precision p, std::uint64_t n, stream_view st);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace gpu_basics

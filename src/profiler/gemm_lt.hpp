// Private: the cuBLASLt and kernel half of gemm_runner, behind a C++17 interface so the .cu
// that implements it needs no C++20 header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu_basics/core/cuda.hpp"

namespace gpu_basics::detail {

/// precision: 0 fp16, 1 bf16, 2 tf32, 3 fp32 (gemm_precision's order).
class lt_gemm {
 public:
  explicit lt_gemm(std::size_t workspace_bytes);
  ~lt_gemm();
  lt_gemm(const lt_gemm&) = delete;
  lt_gemm& operator=(const lt_gemm&) = delete;

  /// Random normal operands and descriptors for D(m x n) = A^T B with A stored k x m; returns
  /// how many candidate algorithms the heuristic offers (at most max_candidates).
  int prepare(int precision, std::uint64_t m, std::uint64_t n, std::uint64_t k, int max_candidates,
              stream_view s);
  /// `reps` timed runs of candidate c after one warm-up; empty if the candidate cannot run.
  std::vector<double> time_candidate(int c, int reps, stream_view s);
  /// `iterations` runs of candidate c after `warmup`, each between events.
  std::vector<double> run(int c, int warmup, int iterations, stream_view s);
  /// Operands and result as doubles (column-major).
  void download(std::vector<double>& a, std::vector<double>& b, std::vector<double>& d) const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace gpu_basics::detail

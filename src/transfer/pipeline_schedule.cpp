#include "gpu_basics/transfer/pipeline_schedule.hpp"

#include <algorithm>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

std::vector<pipeline_step> prefetch_schedule(std::size_t batches, std::size_t depth,
                                             bool wait_for_release) {
  GPU_BASICS_EXPECTS(depth >= 1, "a pipeline needs at least one buffer");
  std::vector<pipeline_step> steps;
  for (std::size_t i = 0; i < batches; ++i) {
    const std::size_t b = i % depth;
    if (i >= depth && wait_for_release)
      steps.push_back({pipeline_op::copy_wait_compute, i - depth, b});
    steps.push_back({pipeline_op::copy, i, b});
    steps.push_back({pipeline_op::compute_wait_copy, i, b});
    steps.push_back({pipeline_op::compute, i, b});
  }
  return steps;
}

std::vector<pipeline_step> serial_schedule(std::size_t batches) {
  std::vector<pipeline_step> steps;
  for (std::size_t i = 0; i < batches; ++i) {
    steps.push_back({pipeline_op::copy, i, 0});
    steps.push_back({pipeline_op::compute, i, 0});
  }
  return steps;
}

double ideal_pipeline_seconds(std::size_t batches, double copy_s, double compute_s) {
  if (batches == 0) return 0;
  return copy_s + compute_s + static_cast<double>(batches - 1) * std::max(copy_s, compute_s);
}

std::vector<simulated_batch> simulate_schedule(const std::vector<pipeline_step>& steps,
                                               std::size_t batches, double copy_s, double compute_s,
                                               bool one_stream) {
  std::vector<simulated_batch> out(batches, simulated_batch{-1, -1, -1, -1});
  double copy_stream = 0, compute_stream = 0;  // time each stream becomes free
  for (const auto& s : steps) {
    double& cs = copy_stream;
    double& ks = one_stream ? copy_stream : compute_stream;
    switch (s.op) {
      case pipeline_op::copy_wait_compute:
        cs = std::max(cs, out.at(s.batch).compute_end);
        break;
      case pipeline_op::compute_wait_copy:
        ks = std::max(ks, out.at(s.batch).copy_end);
        break;
      case pipeline_op::copy:
        out.at(s.batch).copy_start = cs;
        cs += copy_s;
        out.at(s.batch).copy_end = cs;
        break;
      case pipeline_op::compute:
        out.at(s.batch).compute_start = ks;
        ks += compute_s;
        out.at(s.batch).compute_end = ks;
        break;
    }
  }
  return out;
}

}  // namespace gpu_basics

// What one timed copy (or host memcpy) measured: its sizes, its samples and their summaries. The
// one set of fields behind copy_bench's copy_measurement and the results' copy_figure, which add
// only how they name the direction and the host memory. Host-only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"

namespace gpu_basics {

struct copy_samples {
  std::uint64_t bytes = 0;        // per copy (bidirectional: per direction)
  std::uint64_t bytes_moved = 0;  // per sample, all directions
  unsigned streams = 1;           // 0 for a host memcpy
  bool bidirectional = false;
  std::vector<double> seconds;  // one per sample; empty when schema 1 kept the table only
  /// Bidirectional only: from both copies' start to the last one's end, per sample.
  std::vector<double> seconds_joint;
  summary time_s;
  summary bandwidth_bytes_per_s;  // bytes_moved / seconds, per sample
  std::uint64_t verified_bytes = 0;
  /// How many samples the stopping rule took and why it stopped; absent in results written
  /// before the rule.
  std::optional<sampling_outcome> sampling;

  bool operator==(const copy_samples&) const = default;
};

}  // namespace gpu_basics

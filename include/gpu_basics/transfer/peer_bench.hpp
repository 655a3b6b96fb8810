// Device-to-device copies between every pair of visible GPUs (cudaMemcpyPeerAsync on the copy
// engines): who can access whom, unidirectional and bidirectional bandwidth with peer access on
// and off, and the latency of a small copy. Same method as copy_bench: CUDA events, the one
// stopping rule (warm-up, then samples until it stops), median and spread, and every sample's
// destination zeroed first and checked against the pattern afterwards (a mismatch throws
// verification_error). With one GPU every matrix is one cell: a copy within that GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"

namespace gpu_basics {

struct peer_cell {
  std::optional<summary> uni_on, uni_off;      // bytes/s, one direction
  std::optional<summary> bidir_on, bidir_off;  // bytes/s, both directions together
  std::optional<summary> latency_s;            // one small copy (peer access on where possible)
  /// How each figure's sampling ended (the stopping rule); nullopt where it was not measured.
  std::optional<sampling_outcome> uni_on_sampling, uni_off_sampling;
  std::optional<sampling_outcome> bidir_on_sampling, bidir_off_sampling;
  std::optional<sampling_outcome> latency_sampling;
  std::uint64_t verified_bytes = 0;
};

struct peer_matrices {
  std::vector<int> devices;
  std::vector<std::vector<int>> can_access;   // cudaDeviceCanAccessPeer (1 on the diagonal)
  std::vector<std::vector<peer_cell>> cells;  // [from][to]
  std::uint64_t bytes = 0, latency_bytes = 0;
};

/// Every pair of `devices` (CUDA indices). bytes per copy; latency_bytes for the latency matrix.
/// Each figure is sampled by `rule` (core/sampling.hpp): rule.warmup verified copies untimed,
/// then samples until the rule stops (the rule follows each sample's time; a bandwidth figure
/// keeps the rates).
/// @throws verification_error when a copy did not deliver the pattern; cuda_error,
/// out_of_memory; logic_error for no devices, bytes < 16, latency_bytes outside 1..bytes, or a
/// rule with min_samples < 1, max_samples < min_samples or warmup < 0 (the sampler throws on a
/// max_noise or timeout_s <= 0).
[[nodiscard]] peer_matrices measure_peer_matrices(const std::vector<int>& devices,
                                                  std::uint64_t bytes, std::uint64_t latency_bytes,
                                                  const stopping_rule& rule);

}  // namespace gpu_basics

// The between-GPUs part of `gpu-basics transfer`: peer-to-peer access, bandwidth and latency
// matrices over every visible GPU, and NCCL collectives with nccl-tests' bus bandwidth. With one
// GPU the matrices are one cell (copies within that GPU) and the collectives run with one rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

/// Copies from one GPU to another (or within one, on the diagonal). Rates in bytes/s; nullopt
/// where nothing was measured. From a schema-1 table alone only `median` is known (count 0).
struct peer_pair {
  std::optional<summary> uni_peer_on_bytes_per_s;
  std::optional<summary> uni_peer_off_bytes_per_s;
  std::optional<summary> bidir_peer_on_bytes_per_s;
  std::optional<summary> bidir_peer_off_bytes_per_s;
  std::optional<summary> latency_s;
  std::uint64_t verified_bytes = 0;

  bool operator==(const peer_pair&) const = default;
};
GPU_BASICS_JSON(peer_pair, uni_peer_on_bytes_per_s, uni_peer_off_bytes_per_s,
                bidir_peer_on_bytes_per_s, bidir_peer_off_bytes_per_s, latency_s, verified_bytes)

struct peer_result {
  std::vector<int> devices;                     // CUDA indices, in matrix order
  std::vector<std::vector<int>> can_access;     // [from][to], 1 on the diagonal
  std::vector<std::vector<peer_pair>> cells;    // [from][to]
  std::uint64_t bytes = 0;                      // per bandwidth copy
  std::uint64_t latency_bytes = 0;              // per latency copy
  std::optional<std::uint64_t> verified_bytes;  // over every cell; nullopt when not kept

  bool operator==(const peer_result&) const = default;
};
GPU_BASICS_JSON(peer_result, devices, can_access, cells, bytes, latency_bytes, verified_bytes)

/// One collective at one size.
struct collective_figure {
  std::string op;  // "all_reduce", "all_gather", "reduce_scatter"
  std::uint64_t bytes = 0;
  int ranks = 1;
  summary time_s;  // from a schema-1 table alone only the median (count 0)
  double alg_bytes_per_s = 0;
  double bus_bytes_per_s = 0;
  std::optional<std::uint64_t> verified_elements;  // nullopt when not kept
  std::optional<sampling_outcome> sampling;        // absent in results written before the rule

  bool operator==(const collective_figure&) const = default;
};
GPU_BASICS_JSON(collective_figure, op, bytes, ranks, time_s, alg_bytes_per_s, bus_bytes_per_s,
                verified_elements, sampling)

/// One row of the "nccl" table: every collective at one size, in `nccl_result::ops` order.
struct collective_size {
  std::uint64_t bytes = 0;  // the size asked for (a collective may round it down to split evenly)
  std::vector<collective_figure> ops;

  bool operator==(const collective_size&) const = default;
};
GPU_BASICS_JSON(collective_size, bytes, ops)

struct nccl_result {
  std::optional<std::string> unavailable;  // why NCCL could not run; nullopt when it ran
  std::string version;                     // "2.27.3"
  int ranks = 0;
  int iterations = 0;  // the most timed runs per collective and size (benchmark.iterations)
  std::vector<std::string> ops;
  std::vector<collective_size> sizes;

  bool operator==(const nccl_result&) const = default;
};
GPU_BASICS_JSON(nccl_result, unavailable, version, ranks, iterations, ops, sizes)

struct multi_gpu_result {
  peer_result peer;
  std::optional<nccl_result> nccl;  // nullopt only when schema 1 kept no "nccl" table

  bool operator==(const multi_gpu_result&) const = default;
};
GPU_BASICS_JSON(multi_gpu_result, peer, nccl)

/// Notes of "p2p_access", "p2p_bandwidth", "p2p_bidirectional", "p2p_latency" and "nccl".
[[nodiscard]] std::vector<note> explain_multi_gpu(const multi_gpu_result& r,
                                                  const device_facts& facts);
/// "p2p_access", "p2p_bandwidth", "p2p_bandwidth_peer_off", "p2p_bidirectional",
/// "p2p_bidirectional_peer_off", "p2p_latency", "nccl".
[[nodiscard]] std::vector<presentation::table> present_multi_gpu(const multi_gpu_result& r);
/// From a schema-1 block: the matrices rebuilt from their tables (a row per GPU), fuller figures
/// from extra.peer / extra.nccl where kept. nullopt when the block has no "p2p_access" table.
/// @throws json_path_error (a format_error) naming the key path in the block of what cannot be
/// read.
[[nodiscard]] std::optional<multi_gpu_result> multi_gpu_from_v1(const nlohmann::json& block);

}  // namespace gpu_basics::lessons

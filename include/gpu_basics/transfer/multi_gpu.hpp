// Beyond one GPU, the host-only half: collective bandwidth as nccl-tests defines it, the exact
// reference values that verify a collective. Unit-tested on the
// CPU; the measurements live in peer_bench.hpp and nccl.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpu_basics {

enum class collective { all_reduce, all_gather, reduce_scatter };
/// "all_reduce", "all_gather", "reduce_scatter".
[[nodiscard]] std::string_view to_string(collective c) noexcept;

/// nccl-tests' bus-bandwidth factor for n ranks: all-reduce 2(n-1)/n, all-gather and
/// reduce-scatter (n-1)/n. It turns the algorithm bandwidth (bytes / time) into what each link
/// carried, comparable with the hardware's link speed. 0 for one rank: nothing crosses a link.
/// @throws logic_error when ranks < 1.
[[nodiscard]] double bus_bandwidth_factor(collective c, int ranks);

/// bytes as nccl-tests counts them: all-reduce the buffer each rank holds; all-gather the
/// gathered (output) buffer; reduce-scatter the input buffer (ranks x the output).
struct collective_rate {
  double alg_bytes_per_s = 0;
  double bus_bytes_per_s = 0;
};
/// The rates of a collective of `bytes` that took `seconds` (zeros when seconds <= 0).
/// @throws logic_error when ranks < 1 (and seconds > 0).
[[nodiscard]] collective_rate collective_bandwidth(collective c, std::uint64_t bytes,
                                                   double seconds, int ranks);

/// Elements of `elem_bytes` each rank sends for a collective of `bytes` (as counted above), or
/// 0 where `bytes` does not split evenly into ranks x elem_bytes.
/// @throws logic_error when ranks < 1 or elem_bytes < 1.
[[nodiscard]] std::uint64_t collective_send_count(collective c, std::uint64_t bytes, int ranks,
                                                  std::uint64_t elem_bytes);

/// The input value rank r puts at element i: small integers stored in float, so sums over up to
/// thousands of ranks are exact and a result can be checked with ==.
[[nodiscard]] float collective_input(int rank, std::uint64_t i) noexcept;
/// What element i of the output must hold on any rank after the collective (all-gather: element
/// i of the gathered buffer; reduce-scatter: element i of rank `rank`'s output).
[[nodiscard]] float collective_expected(collective c, int ranks, int rank, std::uint64_t i,
                                        std::uint64_t count_per_rank) noexcept;

}  // namespace gpu_basics

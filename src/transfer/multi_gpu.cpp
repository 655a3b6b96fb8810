#include "gpu_basics/transfer/multi_gpu.hpp"

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/transfer/collective_values.h"

namespace gpu_basics {

std::string_view to_string(collective c) noexcept {
  switch (c) {
    case collective::all_reduce:
      return "all_reduce";
    case collective::all_gather:
      return "all_gather";
    case collective::reduce_scatter:
      return "reduce_scatter";
  }
  return "?";
}

double bus_bandwidth_factor(collective c, int ranks) {
  GPU_BASICS_EXPECTS(ranks >= 1, "a collective needs at least one rank");
  const double n = ranks;
  return c == collective::all_reduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

collective_rate collective_bandwidth(collective c, std::uint64_t bytes, double seconds, int ranks) {
  collective_rate r;
  if (!(seconds > 0)) return r;
  r.alg_bytes_per_s = static_cast<double>(bytes) / seconds;
  r.bus_bytes_per_s = r.alg_bytes_per_s * bus_bandwidth_factor(c, ranks);
  return r;
}

std::uint64_t collective_send_count(collective c, std::uint64_t bytes, int ranks,
                                    std::uint64_t elem_bytes) {
  GPU_BASICS_EXPECTS(ranks >= 1 && elem_bytes >= 1, "bad collective shape");
  const auto n = static_cast<std::uint64_t>(ranks);
  if (c == collective::all_reduce) return bytes % elem_bytes ? 0 : bytes / elem_bytes;
  // all-gather: bytes = n x per-rank input; reduce-scatter: bytes = input = n x per-rank output.
  if (bytes % (n * elem_bytes)) return 0;
  return c == collective::all_gather ? bytes / (n * elem_bytes) : bytes / elem_bytes;
}

float collective_input(int rank, std::uint64_t i) noexcept {
  return detail::collective_input_value(rank, i);
}

float collective_expected(collective c, int ranks, int rank, std::uint64_t i,
                          std::uint64_t count_per_rank) noexcept {
  return detail::collective_expected_value(static_cast<int>(c), ranks, rank, i, count_per_rank);
}

}  // namespace gpu_basics

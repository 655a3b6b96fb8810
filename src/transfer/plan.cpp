#include "gpu_basics/transfer/plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

std::vector<chunk> split_even(std::uint64_t bytes, unsigned parts, std::uint64_t align) {
  GPU_BASICS_EXPECTS(parts > 0, "split into zero parts");
  GPU_BASICS_EXPECTS(align > 0, "zero alignment");
  std::vector<chunk> out;
  if (bytes == 0) return out;
  const std::uint64_t units = bytes / align;  // whole aligned units
  const std::uint64_t n = std::max<std::uint64_t>(1, std::min<std::uint64_t>(parts, units));
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t end = (i + 1 == n) ? bytes : (units * (i + 1) / n) * align;
    out.push_back({offset, end - offset});
    offset = end;
  }
  return out;
}

std::vector<chunk> split_fixed(std::uint64_t bytes, std::uint64_t chunk_bytes) {
  GPU_BASICS_EXPECTS(chunk_bytes > 0, "zero chunk size");
  std::vector<chunk> out;
  for (std::uint64_t off = 0; off < bytes; off += chunk_bytes)
    out.push_back({off, std::min(chunk_bytes, bytes - off)});
  return out;
}

std::vector<std::uint64_t> power_of_two_sweep(std::uint64_t min_bytes, std::uint64_t max_bytes) {
  GPU_BASICS_EXPECTS(min_bytes > 0 && max_bytes >= min_bytes, "bad sweep range");
  std::vector<std::uint64_t> out;
  std::uint64_t p = 1;
  while (p < min_bytes && p <= (max_bytes >> 1)) p <<= 1;
  if (p < min_bytes) return {min_bytes};
  for (; p <= max_bytes; p <<= 1) {
    out.push_back(p);
    if (p > (UINT64_MAX >> 1)) break;
  }
  if (out.empty()) out.push_back(min_bytes);
  return out;
}

}  // namespace gpu_basics

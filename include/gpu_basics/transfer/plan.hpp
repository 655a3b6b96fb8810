// Copy planning: byte sizes of tensors, chunking a copy over streams or staging buffers, and
// power-of-two sweeps. Host-only arithmetic, unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_basics/core/units.hpp"  // format_bytes, for the plans' users

namespace gpu_basics {

struct chunk {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  bool operator==(const chunk&) const = default;
};

/// Splits [0, bytes) into at most `parts` contiguous chunks whose boundaries are multiples of
/// `align` (the last chunk takes the remainder). Fewer chunks come back when the copy is too
/// small to give each at least `align` bytes.
/// @throws logic_error for parts == 0 or align == 0.
[[nodiscard]] std::vector<chunk> split_even(std::uint64_t bytes, unsigned parts,
                                            std::uint64_t align = 4096);

/// Fixed-size chunks of `chunk_bytes` (the last one shorter): the staging ring's schedule.
/// @throws logic_error for chunk_bytes == 0.
[[nodiscard]] std::vector<chunk> split_fixed(std::uint64_t bytes, std::uint64_t chunk_bytes);

/// Powers of two from the first >= min_bytes to the last <= max_bytes (min itself if none).
/// @throws logic_error for min_bytes == 0 or max_bytes < min_bytes.
[[nodiscard]] std::vector<std::uint64_t> power_of_two_sweep(std::uint64_t min_bytes,
                                                            std::uint64_t max_bytes);

}  // namespace gpu_basics

// What the pickle reader and the values share (internal to the memory module).
#pragma once

#include <cstdint>

namespace gpu_basics::pickle::detail {

/// a + b, or UINT64_MAX when that overflows.
[[nodiscard]] inline std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) noexcept {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace gpu_basics::pickle::detail

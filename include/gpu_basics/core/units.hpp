// Units, one meaning per name: kKiB..kTiB are byte counts (integers). To show bytes in a unit,
// divide by them as doubles (bytes / double(kMiB)); format_bytes (gpu_basics/core/format.hpp)
// writes a size as people read it.
#pragma once

#include <cstdint>

namespace gpu_basics {

inline constexpr std::uint64_t kKiB = 1ull << 10;
inline constexpr std::uint64_t kMiB = 1ull << 20;
inline constexpr std::uint64_t kGiB = 1ull << 30;
inline constexpr std::uint64_t kTiB = 1ull << 40;

/// Bytes as a count of `unit` (kMiB: mebibytes), for printing.
[[nodiscard]] constexpr double in_units(std::uint64_t bytes, std::uint64_t unit) noexcept {
  return static_cast<double>(bytes) / static_cast<double>(unit);
}

}  // namespace gpu_basics

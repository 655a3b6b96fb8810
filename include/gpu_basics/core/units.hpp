// Units, one meaning per name: kKiB..kTiB are byte counts (integers); kPerMiB and kPerGiB are
// the factors that turn bytes into MiB or GiB (a table column's scale); format_bytes writes a
// size as people read it.
#pragma once

#include <cstdint>
#include <string>

namespace gpu_basics {

inline constexpr std::uint64_t kKiB = 1ull << 10;
inline constexpr std::uint64_t kMiB = 1ull << 20;
inline constexpr std::uint64_t kGiB = 1ull << 30;
inline constexpr std::uint64_t kTiB = 1ull << 40;

inline constexpr double kPerMiB = 1.0 / static_cast<double>(kMiB);
inline constexpr double kPerGiB = 1.0 / static_cast<double>(kGiB);

/// "256 MiB", "4 KiB", "1.5 GiB", "123 B".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

}  // namespace gpu_basics

// Units, one meaning per name: kKiB..kTiB are byte counts (integers); kPerMiB and kPerGiB are
// the factors that turn bytes into MiB or GiB (a table column's scale); format_bytes writes a
// size as people read it. A device-to-device rate has one convention in every command, below.
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

// Note [D2D convention]: a device-to-device copy reads every byte and writes it again, so device
// memory moves twice the bytes copied. Saved results keep the copy's own rate (bytes copied /
// time); every command that shows a D2D rate shows it as read + write, the figure an HBM
// datasheet states, and a header or text that also shows the copy's own rate says "copied".
// Headers and texts name their convention with these words, so that a reader never has to guess.
inline constexpr const char* kD2dReadWrite = "read + write";
inline constexpr const char* kD2dCopied = "copied";

/// A D2D copy's rate (bytes copied / time) as device memory traffic: read + write, twice it.
[[nodiscard]] constexpr double d2d_read_write(double copied_bytes_per_s) {
  return 2 * copied_bytes_per_s;
}

}  // namespace gpu_basics

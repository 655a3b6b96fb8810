// How the unified lesson's tables and notes word its figures: rates, durations, sizes, ratios.
// Private to the module; one definition for the tables and the notes so they agree.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/unified.hpp"

namespace gpu_basics::lessons::unified_text {

/// "12.3 GB/s" (decimal GB, as copy rates are quoted).
inline std::string rate(double bytes_per_s) {
  if (bytes_per_s >= 1e12) return fmt::format("{:.2f} TB/s", bytes_per_s / 1e12);
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}

/// A duration: ns below 1 us, us below 1 ms, ms below 10 s, else s.
inline std::string duration(double s) {
  if (s < 1e-6) return fmt::format("{:.0f} ns", s * 1e9);
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 10) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} s", s);
}

/// "3.2x faster than `than`" / "3.2x slower than `than`": a time `a` against a time `b` (both
/// > 0). The comparison always names what it is against, so it reads one way only.
inline std::string faster_or_slower(double a, double b, std::string_view than) {
  if (a <= b) return fmt::format("{:.1f}x faster than {}", b / a, than);
  return fmt::format("{:.1f}x slower than {}", a / b, than);
}

/// Bytes as MiB with no decimals: "514 MiB" (signed: a step can give memory back).
inline std::string mib(std::int64_t bytes) {
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) * kPerMiB);
}

/// A size, exact where it is a whole unit: "512 MiB".
inline std::string size(std::uint64_t bytes) {
  return format_bytes(bytes);
}

/// Bytes as whole MiB, rounded as mib() prints them: figures compared in a sentence are the ones
/// a table beside it shows.
inline std::int64_t whole_mib(std::int64_t bytes) {
  return static_cast<std::int64_t>(std::nearbyint(static_cast<double>(bytes) * kPerMiB));
}

/// A percentage of `part` in `whole` with no decimals ("n/a" when whole is 0).
inline std::string percent(double part, double whole) {
  if (!(whole > 0)) return "n/a";
  return fmt::format("{:.0f}%", 100.0 * part / whole);
}

}  // namespace gpu_basics::lessons::unified_text

namespace gpu_basics::lessons {
/// The "belief / what we measured / why" table (unified_notes.cpp, beside the notes it matches);
/// its D2D row compares the course's figures with the measured GPU's (`facts`).
[[nodiscard]] presentation::table beliefs_table(const beliefs_result& b, const device_facts& facts);
}  // namespace gpu_basics::lessons

// The one host clock of gpu-basics: std::chrono::steady_clock, which is CLOCK_MONOTONIC on
// Linux. Host timers, NVML samples, allocator history, user ranges and the timestamps CUPTI is
// given all read it, so their times line up on one axis in a trace. Host-only, header-only.
#pragma once

#include <chrono>
#include <cstdint>

namespace gpu_basics {

/// Nanoseconds on the host clock (an arbitrary epoch, e.g. boot): for timestamps.
[[nodiscard]] inline std::uint64_t host_clock_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

/// The same clock in seconds: for durations, as the difference of two readings.
[[nodiscard]] inline double host_seconds() noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace gpu_basics

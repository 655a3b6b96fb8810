// Bytes a memory pool held over time, as plain points. The allocator (memory/) turns its history
// into them and a trace (profiler/) plots them: this type is where the two meet, so neither
// includes the other. Host-only.
#pragma once

#include <cstdint>

namespace gpu_basics {

/// What a pool held just after one change.
struct memory_usage_point {
  std::uint64_t time_ns = 0;         // host_clock_ns() (clock.hpp)
  std::int64_t allocated_bytes = 0;  // handed out to the program
  std::int64_t reserved_bytes = 0;   // taken from the device (allocated + cached)

  bool operator==(const memory_usage_point&) const = default;
};

}  // namespace gpu_basics

// User ranges: an RAII scoped_range emits an NVTX range (seen by Nsight Systems and any NVTX
// consumer) and, while a trace is being recorded, a CPU slice on the calling thread's track.
// Ranges, the sampler and CUPTI's GPU timestamps share one clock: host_clock_ns() (clock.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_basics/profiler/activity.hpp"

namespace gpu_basics {

/// The id of the calling thread as CUPTI reports it for API records (pthread_self's low 32 bits).
[[nodiscard]] std::uint64_t trace_thread_id() noexcept;

/// The process-wide log of user ranges. Recording is off until start_recording(); ranges that
/// end while it is on are kept (thread-safe).
class range_log {
 public:
  /// Clears the log and starts keeping ranges.
  static void start_recording();
  /// Stops recording and returns the ranges recorded since start_recording().
  static std::vector<range_record> stop_recording();
  /// Whether ranges are being kept.
  [[nodiscard]] static bool recording() noexcept;
  /// Keeps `r` while recording; drops it otherwise.
  static void record(range_record r);
};

class scoped_range {
 public:
  /// Pushes NVTX range `name` and notes the start time.
  explicit scoped_range(std::string name);
  /// Pops the NVTX range and, while recording, logs it on the calling thread's track.
  ~scoped_range();
  scoped_range(const scoped_range&) = delete;
  scoped_range& operator=(const scoped_range&) = delete;

 private:
  std::string name_;
  std::uint64_t start_ns_;
};

}  // namespace gpu_basics

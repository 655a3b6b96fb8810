// An RAII region timer on CUDA events: construction records a start event (and the host
// clock), destruction records the stop event; the GPU time is added to the registry when the
// region's events are resolved (resolve(), or the registry's owner calling flush()).
#pragma once

#include <string>
#include <vector>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/profiler/timing.hpp"

namespace gpu_basics {

/// Collects finished regions until their events complete, then records them.
class gpu_timing {
 public:
  /// Regions go to `registry`, which must outlive this.
  explicit gpu_timing(timing_registry& registry) : registry_(registry) {}
  /// Flushes; errors are logged, not thrown.
  ~gpu_timing() { flush_nothrow(); }
  gpu_timing(const gpu_timing&) = delete;
  gpu_timing& operator=(const gpu_timing&) = delete;

  /// Waits for every pending region and records it.
  /// @throws cuda_error when a wait or an elapsed time fails.
  void flush();

  class scope {
   public:
    /// Starts region `name` on `s`: the start event and the host clock.
    /// @throws cuda_error when an event cannot be created or recorded.
    scope(gpu_timing& owner, std::string name, stream_view s);
    /// Records the stop event and hands the region to its owner; errors are logged, not thrown.
    ~scope();
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    gpu_timing& owner_;
    std::string name_;
    stream_view stream_;
    cuda_event start_, stop_;
    double host_start_;
  };

 private:
  struct pending {
    std::string name;
    cuda_event start, stop;
    double host_s;
  };
  void flush_nothrow() noexcept;
  timing_registry& registry_;
  std::vector<pending> pending_;
  friend class scope;
};

}  // namespace gpu_basics

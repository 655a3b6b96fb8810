// Collects GPU and CPU activity between start() and stop(): with CUPTI's activity API where it
// can be had (kernels, copies, memsets, runtime API calls), else nothing, and the log says why.
#pragma once

#include <memory>
#include <string>

#include "gpu_basics/profiler/activity.hpp"

namespace gpu_basics {

class activity_tracer {
 public:
  virtual ~activity_tracer() = default;
  /// Starts collecting; what an earlier start() collected is dropped.
  /// @throws gpu_basics::error when CUPTI refuses an activity kind (CUPTI tracer).
  virtual void start() = 0;
  /// Flushes and returns everything recorded since start(), with dropped-record counts.
  virtual activity_log stop() = 0;
};

/// A CUPTI tracer, or nullptr and *why (no CUPTI in this build, another profiler holds CUPTI,
/// no driver). Only one may be active in a process.
[[nodiscard]] std::unique_ptr<activity_tracer> make_cupti_tracer(std::string* why);

}  // namespace gpu_basics

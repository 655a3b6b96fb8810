#pragma once
// Where a lesson's time goes: a part timed on the host clock and logged at debug level.

#include "gpu_basics/core/clock.hpp"

namespace gpu_basics::lessons {

/// The debug line of timed_part(): "<lesson>: <name> took 1.23 s".
void log_part_time(const char* lesson, const char* name, double seconds);

/// Runs `f()` and logs (debug) how long the part `name` of `lesson` took, also when it throws.
template <class F>
auto timed_part(const char* lesson, const char* name, F&& f) {
  struct logger {
    const char* lesson;
    const char* name;
    double t0;
    ~logger() { log_part_time(lesson, name, host_seconds() - t0); }
  } log{lesson, name, host_seconds()};
  return f();
}

}  // namespace gpu_basics::lessons

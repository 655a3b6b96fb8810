// A trace over the steps of a workload, with a schedule like torch.profiler's: `wait` steps
// untraced (start-up: module loading, handle creation), `warmup` steps traced and discarded (the
// tracer's own start-up), then `active` steps kept. Drives any activity_tracer (CUPTI, or a fake
// in tests); without one, the trace keeps the CPU-side user ranges and says why. Host-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu_basics/profiler/activity_tracer.hpp"

namespace gpu_basics {

struct trace_schedule {
  int wait = 1;
  int warmup = 1;
  int active = 0;  // 0: until finish()
};

enum class trace_phase { waiting, warming_up, active, done };
/// "waiting", "warming up", "active", "done".
[[nodiscard]] std::string_view to_string(trace_phase p) noexcept;

/// The phase during step `step` (0-based) of a schedule. Pure: tested on its own.
[[nodiscard]] trace_phase phase_at(const trace_schedule& s, long step) noexcept;

class trace_session {
 public:
  /// tracer may be null (no CUPTI): `why` then says so in the trace's metadata.
  /// @throws logic_error when a schedule count is negative.
  trace_session(std::unique_ptr<activity_tracer> tracer, std::string why, trace_schedule schedule);
  /// Finishes the trace if finish() was not called; errors are swallowed.
  ~trace_session();
  trace_session(const trace_session&) = delete;
  trace_session& operator=(const trace_session&) = delete;

  /// Marks the start of the next step (call before each step's work, then finish() after the
  /// last one).
  /// @throws logic_error after finish(); gpu_basics::error when the tracer cannot start.
  void step();
  /// Ends the trace (if still recording) and returns what the active steps recorded.
  activity_log finish();

  /// The phase of the current step.
  [[nodiscard]] trace_phase phase() const noexcept { return phase_at(schedule_, step_); }
  /// Steps begun so far.
  [[nodiscard]] long steps() const noexcept { return step_ + 1; }
  /// The schedule given.
  [[nodiscard]] const trace_schedule& schedule() const noexcept { return schedule_; }
  /// Start of the active window on host_clock_ns(), valid once finish() ran.
  [[nodiscard]] std::uint64_t active_start_ns() const noexcept { return active_start_ns_; }
  /// End of the active window on host_clock_ns(), valid once finish() ran.
  [[nodiscard]] std::uint64_t active_end_ns() const noexcept { return active_end_ns_; }

 private:
  void enter(trace_phase from, trace_phase to);
  std::unique_ptr<activity_tracer> tracer_;
  std::string why_;
  trace_schedule schedule_;
  long step_ = -1;
  bool recording_ = false;
  bool finished_ = false;
  std::uint64_t active_start_ns_ = 0, active_end_ns_ = 0;
  activity_log log_;
};

}  // namespace gpu_basics

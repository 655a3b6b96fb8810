#include "gpu_basics/profiler/trace_session.hpp"

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/profiler/range.hpp"

namespace gpu_basics {

std::string_view to_string(trace_phase p) noexcept {
  switch (p) {
    case trace_phase::waiting:
      return "waiting";
    case trace_phase::warming_up:
      return "warming up";
    case trace_phase::active:
      return "active";
    case trace_phase::done:
      return "done";
  }
  return "?";
}

trace_phase phase_at(const trace_schedule& s, long step) noexcept {
  if (step < s.wait) return trace_phase::waiting;
  if (step < s.wait + s.warmup) return trace_phase::warming_up;
  if (s.active == 0 || step < s.wait + s.warmup + s.active) return trace_phase::active;
  return trace_phase::done;
}

trace_session::trace_session(std::unique_ptr<activity_tracer> tracer, std::string why,
                             trace_schedule schedule)
    : tracer_(std::move(tracer)), why_(std::move(why)), schedule_(schedule) {
  GPU_BASICS_EXPECTS(schedule.wait >= 0 && schedule.warmup >= 0 && schedule.active >= 0,
                     "trace schedule steps must be >= 0");
}

trace_session::~trace_session() {
  try {
    if (!finished_) (void)finish();
  } catch (...) {  // never throw from a destructor
  }
}

void trace_session::enter(trace_phase from, trace_phase to) {
  const bool was = from == trace_phase::warming_up || from == trace_phase::active;
  const bool now = to == trace_phase::warming_up || to == trace_phase::active;
  if (!was && now) {
    if (tracer_)
      tracer_->start();
    else
      range_log::start_recording();
    recording_ = true;
  }
  if (to == trace_phase::active && from != trace_phase::active) active_start_ns_ = host_clock_ns();
  if (was && !now) {
    active_end_ns_ = host_clock_ns();
    if (tracer_)
      log_ = tracer_->stop();
    else {
      log_ = activity_log{};
      log_.ranges = range_log::stop_recording();
      log_.source = why_;
    }
    recording_ = false;
    if (from == trace_phase::active)
      keep_window(log_, active_start_ns_, active_end_ns_);
    else {  // stopped during warm-up: nothing kept
      activity_log empty;
      empty.source = log_.source;
      log_ = std::move(empty);
    }
  }
}

void trace_session::step() {
  GPU_BASICS_EXPECTS(!finished_, "trace_session::step after finish");
  const trace_phase from = phase();
  ++step_;
  enter(from, phase());
}

activity_log trace_session::finish() {
  if (finished_) return std::move(log_);
  finished_ = true;
  const trace_phase from = phase();
  if (recording_)
    enter(from, trace_phase::done);
  else if (!tracer_)
    log_.source = why_;
  return std::move(log_);
}

}  // namespace gpu_basics

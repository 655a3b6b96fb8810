// --trace PATH: a lesson's trace session and the file it writes (the CUDA edge of
// trace_output.hpp; what the summary shows is in trace_output.cpp).
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/trace_output.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/profiler/activity_tracer.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/profiler/trace_counters.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"
namespace gpu_basics::lessons {

std::unique_ptr<trace_session> start_trace(const context& ctx, trace_schedule schedule) {
  if (!ctx.trace_path) return nullptr;
  std::string why;
  auto tracer = make_cupti_tracer(&why);
  if (!tracer) spdlog::warn("{}: the trace keeps CPU ranges and counters only", why);
  return std::make_unique<trace_session>(std::move(tracer), why, schedule);
}

trace_summary write_trace(const context& ctx, trace_session& session,
                          const std::vector<gpu_sample>* samples,
                          const std::vector<history_event>* history) {
  const activity_log log = session.finish();
  const std::uint64_t origin = session.active_start_ns();
  trace_writer w;
  trace_summary s;
  s.path = *ctx.trace_path;
  s.source = log.source;
  s.device = ctx.cfg.device;
  const auto dev = static_cast<std::int64_t>(ctx.cfg.device);
  s.flows = static_cast<std::int64_t>(add_activity(w, log, origin));
  if (samples)
    s.nvml_counter_events =
        static_cast<std::int64_t>(add_sample_counters(w, *samples, origin, dev));
  if (history)
    s.allocator_counter_events =
        static_cast<std::int64_t>(add_memory_counters(w, memory_usage(*history), origin, dev));
  w.name_process(dev, fmt::format("GPU {}", dev), static_cast<int>(dev));
  nlohmann::json counts = activity_counts(log);
  counts["flows"] = s.flows;
  counts["nvml_counter_events"] = s.nvml_counter_events;
  counts["allocator_counter_events"] = s.allocator_counter_events;
  w.metadata("environment", environment_json(ctx.cfg, ctx.devices, ctx.nvml_status));
  w.metadata("counts", counts);
  w.metadata("schedule", {{"steps", session.steps()},
                          {"active_start_ns", origin},
                          {"active_end_ns", session.active_end_ns()}});
  const double t0 = host_seconds();
  w.write(*ctx.trace_path);
  s.write_s = host_seconds() - t0;
  spdlog::info("wrote {} (open it in https://ui.perfetto.dev)", *ctx.trace_path);
  const auto n = [](std::size_t v) { return static_cast<std::int64_t>(v); };
  s.kernels = n(log.kernels.size());
  s.memcpys = n(log.memcpys.size());
  s.memsets = n(log.memsets.size());
  s.api_calls = n(log.api_calls.size());
  s.syncs = n(log.syncs.size());
  s.ranges = n(log.ranges.size());
  s.dropped_records = n(log.dropped_records);
  s.events = n(w.size());
  s.schedule_wait = session.schedule().wait;
  s.schedule_warmup = session.schedule().warmup;
  return s;
}

}  // namespace gpu_basics::lessons

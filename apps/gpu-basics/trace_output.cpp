#include "trace_output.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/profiler/activity_tracer.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/profiler/trace_counters.hpp"

namespace gpu_basics::cli {

std::unique_ptr<trace_session> start_trace(const context& ctx, trace_schedule schedule) {
  if (!ctx.trace_path) return nullptr;
  std::string why;
  auto tracer = make_cupti_tracer(&why);
  if (!tracer) spdlog::warn("{}: the trace keeps CPU ranges and counters only", why);
  return std::make_unique<trace_session>(std::move(tracer), why, schedule);
}

void write_trace(const context& ctx, trace_session& session, report& r, const std::vector<gpu_sample>* samples,
                 const std::vector<history_event>* history) {
  const activity_log log = session.finish();
  const std::uint64_t origin = session.active_start_ns();
  trace_writer w;
  const std::size_t flows = add_activity(w, log, origin);
  const auto dev = static_cast<std::int64_t>(ctx.cfg.device);
  std::size_t nvml_counters = 0, alloc_counters = 0;
  if (samples) nvml_counters = add_sample_counters(w, *samples, origin, dev);
  if (history) alloc_counters = add_allocator_counters(w, *history, origin, dev);
  w.name_process(dev, fmt::format("GPU {}", dev), static_cast<int>(dev));
  nlohmann::json counts = activity_counts(log);
  counts["flows"] = flows;
  counts["nvml_counter_events"] = nvml_counters;
  counts["allocator_counter_events"] = alloc_counters;
  w.metadata("environment", environment_json(ctx.cfg, ctx.devices, ctx.nvml_status));
  w.metadata("counts", counts);
  w.metadata("schedule", {{"steps", session.steps()}, {"active_start_ns", origin},
                          {"active_end_ns", session.active_end_ns()}});
  const double t0 = host_seconds();
  w.write(*ctx.trace_path);
  const double write_s = host_seconds() - t0;
  spdlog::info("wrote {} (open it in https://ui.perfetto.dev)", *ctx.trace_path);

  table t;
  t.id = "trace";
  t.title = fmt::format("Trace written to {}", *ctx.trace_path);
  t.columns = {{"what", "what"}, {"count", "count", 1.0, 0}};
  const auto row = [&](const char* what, std::uint64_t n) { t.add_row({std::string(what), static_cast<std::int64_t>(n)}); };
  row("kernels", log.kernels.size());
  row("memory copies", log.memcpys.size());
  row("memsets", log.memsets.size());
  row("CUDA runtime API calls", log.api_calls.size());
  row("synchronizations (CPU waiting for the GPU)", log.syncs.size());
  row("user ranges (scoped_range / NVTX)", log.ranges.size());
  row("launch -> GPU flow arrows", flows);
  row("NVML counter samples", nvml_counters);
  row("allocator counter samples", alloc_counters);
  row("records dropped by CUPTI", log.dropped_records);
  row("trace events written", w.size());
  t.notes.push_back(fmt::format(
      "- Source: {}. {} events written in {:.1f} ms. Open the file in https://ui.perfetto.dev (or "
      "chrome://tracing): GPU {} holds a track per stream and the counters; the CPU process a track "
      "per thread with API calls, waits and user ranges.",
      log.source, w.size(), write_s * 1e3, dev));
  t.notes.push_back(
      "- Timestamps are on one clock (CLOCK_MONOTONIC): CUPTI is given it for GPU records, and user "
      "ranges and NVML samples read it, so a kernel lines up with the range and the power sample "
      "around it. Each arrow joins a launch (CPU) to the kernel or copy it started (GPU).");
  const auto& sch = session.schedule();
  if (sch.wait == 0 && sch.warmup == 0)
    t.notes.push_back("- The whole workload is traced (it has no start-up to leave out).");
  else
    t.notes.push_back(fmt::format(
        "- Schedule: the first {} step(s) untraced (start-up), the next {} traced and discarded (the "
        "tracer's own start-up), the rest kept, as torch.profiler's schedule(wait, warmup, active).",
        sch.wait, sch.warmup));
  r.extra["trace"] = {{"path", *ctx.trace_path}, {"source", log.source}, {"counts", counts},
                      {"events", w.size()}, {"write_s", write_s}};
  r.tables.push_back(std::move(t));
}

}  // namespace gpu_basics::cli

#include "gpu_basics/lessons/trace_output.hpp"

#include <fmt/format.h>

namespace gpu_basics::lessons {

presentation::table present_trace(const trace_summary& s) {
  presentation::table t;
  t.id = "trace";
  t.title = fmt::format("Trace written to {}", s.path);
  t.columns = {{"what", "what"}, {"count", "count", 1.0, 0}};
  const auto row = [&](const char* what, std::int64_t n) { t.add_row({std::string(what), n}); };
  row("kernels", s.kernels);
  row("memory copies", s.memcpys);
  row("memsets", s.memsets);
  row("CUDA runtime API calls", s.api_calls);
  row("synchronizations (CPU waiting for the GPU)", s.syncs);
  row("user ranges (scoped_range / NVTX)", s.ranges);
  row("launch -> GPU flow arrows", s.flows);
  row("NVML counter samples", s.nvml_counter_events);
  row("allocator counter samples", s.allocator_counter_events);
  row("records dropped by CUPTI", s.dropped_records);
  row("trace events written", s.events);
  return t;
}

std::vector<note> explain_trace(const trace_summary& s) {
  std::vector<note> n;
  n.push_back(
      {"trace",
       fmt::format(
           "- Source: {}. {} events written in {:.1f} ms. Open the file in https://ui.perfetto.dev "
           "(or "
           "chrome://tracing): GPU {} holds a track per stream and the counters; the CPU process a "
           "track per thread with API calls, waits and user ranges.",
           s.source, s.events, s.write_s * 1e3, s.device)});
  n.push_back(
      {"trace",
       "- Timestamps are on one clock (CLOCK_MONOTONIC): CUPTI is given it for GPU records, and "
       "user ranges and NVML samples read it, so a kernel lines up with the range and the power "
       "sample around it. Each arrow joins a launch (CPU) to the kernel or copy it started "
       "(GPU)."});
  if (s.schedule_wait == 0 && s.schedule_warmup == 0)
    n.push_back({"trace", "- The whole workload is traced (it has no start-up to leave out)."});
  else
    n.push_back({"trace", fmt::format("- Schedule: the first {} step(s) untraced (start-up), the "
                                      "next {} traced and discarded "
                                      "(the tracer's own start-up), the rest kept, as "
                                      "torch.profiler's schedule(wait, warmup, "
                                      "active).",
                                      s.schedule_wait, s.schedule_warmup)});
  return n;
}

}  // namespace gpu_basics::lessons

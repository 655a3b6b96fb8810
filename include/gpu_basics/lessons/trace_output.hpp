// `--trace PATH` for the lessons: a trace session over a lesson's steps (CUPTI where it can be
// had, else CPU ranges only), then the Chrome/Perfetto file with counter tracks, and a summary of
// what it holds that the lesson keeps in its result and shows as a table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/profiler/trace_session.hpp"

namespace gpu_basics::lessons {

/// What a written trace holds.
struct trace_summary {
  std::string path;
  std::string source;  // "CUPTI ..." or why the trace is CPU-only
  int device = 0;
  std::int64_t kernels = 0;
  std::int64_t memcpys = 0;
  std::int64_t memsets = 0;
  std::int64_t api_calls = 0;
  std::int64_t syncs = 0;
  std::int64_t ranges = 0;
  std::int64_t flows = 0;
  std::int64_t nvml_counter_events = 0;
  std::int64_t allocator_counter_events = 0;
  std::int64_t dropped_records = 0;
  std::int64_t events = 0;  // trace events written
  double write_s = 0;
  int schedule_wait = 0;
  int schedule_warmup = 0;

  bool operator==(const trace_summary&) const = default;
};
GPU_BASICS_JSON(trace_summary, path, source, device, kernels, memcpys, memsets, api_calls, syncs,
                ranges, flows, nvml_counter_events, allocator_counter_events, dropped_records,
                events, write_s, schedule_wait, schedule_warmup)

/// A session when ctx.trace_path is set, else nullptr.
/// @throws logic_error when a schedule count is negative.
[[nodiscard]] std::unique_ptr<trace_session> start_trace(const context& ctx,
                                                         trace_schedule schedule);

/// Finishes the session and writes ctx.trace_path with NVML counters (samples) and allocator
/// counters (history, from zero) where given.
/// @throws io_error when the file cannot be written.
[[nodiscard]] trace_summary write_trace(const context& ctx, trace_session& session,
                                        const std::vector<gpu_sample>* samples,
                                        const std::vector<history_event>* history);

/// The "trace" table: what the file holds.
[[nodiscard]] presentation::table present_trace(const trace_summary& s);
/// Where the file is, how to open it, and how its clock and schedule work.
[[nodiscard]] std::vector<note> explain_trace(const trace_summary& s);

}  // namespace gpu_basics::lessons

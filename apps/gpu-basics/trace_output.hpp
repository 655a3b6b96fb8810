// `--trace PATH` for the lessons: a trace session over a lesson's steps (CUPTI where it can be
// had, else CPU ranges only), then the Chrome/Perfetto file with counter tracks and a table that
// says what it holds.
#pragma once

#include <memory>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/profiler/trace_session.hpp"
#include "lesson.hpp"

namespace gpu_basics::cli {

/// A session when ctx.trace_path is set, else nullptr.
[[nodiscard]] std::unique_ptr<trace_session> start_trace(const context& ctx, trace_schedule schedule);

/// Finishes the session, writes ctx.trace_path with NVML counters (samples) and allocator
/// counters (history, from zero) where given, and adds the "trace" table to r.
void write_trace(const context& ctx, trace_session& session, report& r, const std::vector<gpu_sample>* samples,
                 const std::vector<history_event>* history);

}  // namespace gpu_basics::cli

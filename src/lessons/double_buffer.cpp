// The double-buffering part of the transfer lesson, host-only: its notes and its table (reading
// schema-1 files: v1/double_buffer_v1.cpp). No CUDA header here (tested on the CPU).
#include "gpu_basics/lessons/double_buffer.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"
#include "table_labels.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

constexpr const char* kTable = labels::kDoubleBufferTable;

const pipeline_mode_run* mode_named(const double_buffer_ratio& r, std::string_view name) {
  for (const auto& m : r.modes)
    if (m.name == name) return &m;
  return nullptr;
}

value per_batch(const pipeline_mode_run* m, double n) {
  if (!m || n <= 0) return std::monostate{};
  return m->total_s / n;
}

value ratio_of(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::monostate{};
  return *a / *b;
}

std::optional<double> total_of(const pipeline_mode_run* m) {
  if (!m) return std::nullopt;
  return m->total_s;
}

std::vector<value> ratio_row(const double_buffer_result& r, const double_buffer_ratio& x) {
  const double n = static_cast<double>(r.batches);
  const auto* serial = mode_named(x, "serial");
  const auto* dbl = mode_named(x, "double");
  const auto* tpl = mode_named(x, "triple");
  const double ideal =
      ideal_pipeline_seconds(static_cast<std::size_t>(r.batches), r.copy_s, x.compute_s);
  return {x.compute_to_copy,
          r.copy_s,
          x.compute_s,
          per_batch(serial, n),
          per_batch(dbl, n),
          per_batch(tpl, n),
          n > 0 ? value(ideal / n) : value(std::monostate{}),
          ratio_of(total_of(serial), total_of(dbl)),
          ratio_of(ideal, total_of(dbl)),
          ratio_of(ideal, total_of(tpl)),
          std::string(x.compute_s > r.copy_s ? "compute" : "copy")};
}

table double_buffer_table(const double_buffer_result& r) {
  table t;
  t.id = kTable;
  t.title = fmt::format("Double-buffering: {} batches of {} (pinned), copy stream + compute stream",
                        r.batches, format_bytes(r.batch_bytes));
  t.columns = {{"compute_to_copy", "compute/copy", 1.0, 2},
               {"copy_s", "copy (ms)", 1e3, 2},
               {"compute_s", "compute (ms)", 1e3, 2},
               {"serial_step_s", "serial (ms/batch)", 1e3, 3},
               {"double_step_s", "double (ms/batch)", 1e3, 3},
               {"triple_step_s", "triple (ms/batch)", 1e3, 3},
               {"ideal_step_s", "ideal (ms/batch)", 1e3, 3},
               {"speedup", "double x serial", 1.0, 2},
               {"double_efficiency", "double eff %", 100.0, 1},
               {"triple_efficiency", "triple eff %", 100.0, 1},
               {"bound", "bound"}};
  for (const auto& x : r.ratios) t.add_row(ratio_row(r, x));
  return t;
}

}  // namespace

std::vector<note> explain_double_buffer(const double_buffer_result& r, const device_facts&) {
  std::vector<note> n;
  n.push_back(
      {kTable,
       "- serial: copy a batch, then compute it, on one stream: each batch costs copy + compute. "
       "double / triple: the copy of the next batch runs on its own stream (and copy engine) while "
       "the current one is computed, so a batch costs about max(copy, compute)."});
  n.push_back(
      {kTable,
       "- ideal = copy + compute + (batches - 1) x max(copy, compute): the first copy and the last "
       "compute cannot overlap anything. Efficiency = ideal / achieved."});
  // At compute = copy = c: serial n x 2c, ideal (n + 1) x c, so the most a pipeline can gain is
  // 2n / (n + 1), short of 2 by the first copy and the last compute.
  const double b = static_cast<double>(r.batches);
  const std::string cap = r.batches > 0
                              ? fmt::format(": at most 2n/(n+1) = {:.2f}x for n = {} batches",
                                            2 * b / (b + 1), r.batches)
                              : std::string();
  n.push_back(
      {kTable,
       fmt::format(
           "- Copy-bound (compute/copy < 1): the copy stream never rests and compute waits for "
           "data; "
           "compute-bound (> 1): the copies hide completely. At 1 the gain is largest{}. A third "
           "buffer only helps when copy or compute times vary from batch to batch.",
           cap)});
  std::string checks =
      "- Every batch's checksum matched the CPU's: no buffer was overwritten while in use.";
  if (r.timeline_trace_path)
    checks += fmt::format(" The timelines are in {} (a process per mode, a track per stream).",
                          *r.timeline_trace_path);
  n.push_back({kTable, std::move(checks)});
  if (r.trace) {
    auto t = explain_trace(*r.trace);
    n.insert(n.end(), t.begin(), t.end());
  }
  return n;
}

std::vector<table> present_double_buffer(const double_buffer_result& r) {
  std::vector<table> out;
  out.push_back(double_buffer_table(r));
  if (r.trace) out.push_back(present_trace(*r.trace));
  return out;
}

}  // namespace gpu_basics::lessons

// The double-buffering part of the transfer lesson, host-only: its notes, its table, and the
// result rebuilt from a schema-1 file. No CUDA header here (tested on the CPU).
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/schema_v1.hpp"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

constexpr const char* kTable = "double_buffer";

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

// ---- schema 1 ---------------------------------------------------------------------------------

/// batches and batch bytes from the title, where extra.double_buffer did not keep them.
void sizes_from_title(const nlohmann::json& t, double_buffer_result& r) {
  static const std::regex re(R"(Double-buffering: ([0-9]+) batches of ([^(]+) \(pinned\))");
  const std::string title = t.value("title", std::string());
  std::smatch m;
  if (!std::regex_search(title, m, re)) return;
  r.batches = std::stoull(m[1]);
  r.batch_bytes = schema_v1::bytes_from_text(std::string(m[2]));
}

int depth_of_mode(const std::string& name) {
  if (name == "serial") return 0;
  if (name == "double") return 2;
  if (name == "triple") return 3;
  static const std::regex re(R"(^depth ([0-9]+)$)");
  std::smatch m;
  if (std::regex_match(name, m, re)) return std::stoi(m[1]);
  throw format_error("double_buffer: unknown pipeline mode '" + name + "'");
}

/// The modes of one timelines entry, serial first, then by depth.
std::vector<pipeline_mode_run> modes_from_timeline(const nlohmann::json& tl) {
  std::vector<pipeline_mode_run> out;
  for (const auto& [name, v] : tl.items()) {
    if (name == "compute_to_copy" || name == "lcg_iterations") continue;
    pipeline_mode_run m;
    m.name = name;
    m.depth = depth_of_mode(name);
    m.total_s = v.at("total_s").get<double>();
    m.batches = v.at("batches").get<std::vector<pipeline_batch>>();
    out.push_back(std::move(m));
  }
  std::stable_sort(
      out.begin(), out.end(),
      [](const pipeline_mode_run& a, const pipeline_mode_run& b) { return a.depth < b.depth; });
  return out;
}

/// The modes of one table row: totals from the per-batch figures, no timelines.
std::vector<pipeline_mode_run> modes_from_row(const nlohmann::json& row, std::uint64_t batches) {
  std::vector<pipeline_mode_run> out;
  const double n = static_cast<double>(batches);
  for (const auto& [name, depth] :
       {std::pair<const char*, int>{"serial", 0}, {"double", 2}, {"triple", 3}}) {
    const auto& v = row.at(std::string(name) + "_step_s");
    if (v.is_null()) continue;
    out.push_back({name, depth, v.get<double>() * n, {}});
  }
  return out;
}

/// The ratio traced to double_buffer_trace.json: the one closest to 1 (as measure picks it).
std::optional<double> traced_ratio(const std::vector<double_buffer_ratio>& ratios) {
  std::optional<double> best;
  double closest = 1e300;
  for (const auto& x : ratios)
    if (x.compute_to_copy > 0 && std::abs(std::log(x.compute_to_copy)) < closest) {
      closest = std::abs(std::log(x.compute_to_copy));
      best = x.compute_to_copy;
    }
  return best;
}

double_buffer_ratio ratio_from_v1(const nlohmann::json& row, const nlohmann::json* tl,
                                  std::uint64_t batches) {
  double_buffer_ratio x;
  x.compute_to_copy = row.at("compute_to_copy").get<double>();
  x.compute_s = row.at("compute_s").get<double>();
  if (tl) {
    if (tl->contains("lcg_iterations"))
      x.lcg_iterations = tl->at("lcg_iterations").get<std::uint64_t>();
    x.modes = modes_from_timeline(*tl);
  } else {
    x.modes = modes_from_row(row, batches);
  }
  return x;
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

std::optional<double_buffer_result> double_buffer_from_v1(const nlohmann::json& block) {
  const auto& tables = block.at("tables");
  if (!tables.contains(kTable)) return std::nullopt;
  const auto& t = tables.at(kTable);
  const nlohmann::json extra =
      block.contains("extra") ? block.at("extra") : nlohmann::json::object();
  const nlohmann::json db = extra.contains(kTable) ? extra.at(kTable) : nlohmann::json::object();
  double_buffer_result r;
  sizes_from_title(t, r);
  r.batch_bytes = db.value("batch_bytes", r.batch_bytes);
  r.batches = db.value("batches", r.batches);
  const auto& rows = t.at("rows");
  if (!rows.is_array()) throw format_error("double_buffer: \"rows\" is not a list");
  r.copy_s = db.contains("copy_s") ? db.at("copy_s").get<double>()
             : rows.empty()        ? 0.0
                                   : rows.at(0).at("copy_s").get<double>();
  if (db.contains("trace") && db.at("trace").is_string())
    r.timeline_trace_path = db.at("trace").get<std::string>();
  const nlohmann::json timelines = db.value("timelines", nlohmann::json::array());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json* tl = nullptr;
    if (i < timelines.size() &&
        timelines.at(i).at("compute_to_copy") == rows.at(i).at("compute_to_copy"))
      tl = &timelines.at(i);
    r.ratios.push_back(ratio_from_v1(rows.at(i), tl, r.batches));
  }
  for (const auto& x : r.ratios)
    for (const auto& m : x.modes)
      if (m.depth > 3) r.depth = m.depth;
  if (r.timeline_trace_path) r.timeline_trace_ratio = traced_ratio(r.ratios);
  if (tables.contains("trace"))
    r.trace = schema_v1::trace_from_v1(tables.at("trace"),
                                       extra.contains("trace") ? &extra.at("trace") : nullptr);
  return r;
}

}  // namespace gpu_basics::lessons

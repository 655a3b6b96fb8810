// Reading the double-buffering part of the transfer lesson's schema-1 block (its table, the
// timelines in extra.double_buffer, the trace) back into a double_buffer_result.
#include <algorithm>
#include <cmath>
#include <regex>

#include "../table_labels.hpp"
#include "common.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

namespace {

using v1::extra_of;
using v1::node;
using v1::title_of;

constexpr const char* kTable = labels::kDoubleBufferTable;

/// batches and batch bytes from the title, where extra.double_buffer did not keep them.
void sizes_from_title(const node& t, double_buffer_result& r) {
  static const std::regex re(R"(Double-buffering: ([0-9]+) batches of ([^(]+) \(pinned\))");
  const std::string title = title_of(t);
  std::smatch m;
  if (!std::regex_search(title, m, re)) return;
  r.batches = v1::number_in<std::uint64_t>(t.at("title"), m[1]);
  r.batch_bytes = v1::bytes_in(t.at("title"), std::string(m[2]));
}

/// The depth of a mode named `name` (the key of `where`).
int depth_of_mode(const std::string& name, const node& where) {
  if (name == "serial") return 0;
  if (name == "double") return 2;
  if (name == "triple") return 3;
  static const std::regex re(R"(^depth ([0-9]+)$)");
  std::smatch m;
  if (std::regex_match(name, m, re)) return v1::number_in<int>(where, m[1]);
  throw where.error("not a pipeline mode (serial, double, triple or depth N)");
}

/// The modes of one timelines entry, serial first, then by depth.
std::vector<pipeline_mode_run> modes_from_timeline(const node& tl) {
  std::vector<pipeline_mode_run> out;
  for (const auto& [name, v] : tl.items()) {
    if (name == "compute_to_copy" || name == "lcg_iterations") continue;
    pipeline_mode_run m;
    m.name = name;
    m.depth = depth_of_mode(name, v);
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
std::vector<pipeline_mode_run> modes_from_row(const node& row, std::uint64_t batches) {
  std::vector<pipeline_mode_run> out;
  const double n = static_cast<double>(batches);
  for (const auto& [name, depth] :
       {std::pair<const char*, int>{"serial", 0}, {"double", 2}, {"triple", 3}}) {
    const node v = row.at(std::string(name) + "_step_s");
    if (v.is_null()) continue;
    out.push_back({name, depth, v.get<double>() * n, {}, std::nullopt});
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

double_buffer_ratio ratio_from_v1(const node& row, const std::optional<node>& tl,
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

std::optional<double_buffer_result> double_buffer_from_v1(const nlohmann::json& block) {
  return double_buffer_from_v1(node(block));
}

std::optional<double_buffer_result> double_buffer_from_v1(const node& block) {
  const node tables = block.at("tables");
  const auto t = tables.find(kTable);
  if (!t) return std::nullopt;
  const node extra = extra_of(block);
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const node db = extra.find(kTable).value_or(node(kEmpty, extra.path() + "." + kTable));
  double_buffer_result r;
  sizes_from_title(*t, r);
  r.batch_bytes = db.value("batch_bytes", r.batch_bytes);
  r.batches = db.value("batches", r.batches);
  const node rows = v1::rows_of(*t);
  r.copy_s = db.contains("copy_s") ? db.at("copy_s").get<double>()
             : rows.empty()        ? 0.0
                                   : rows.at(0).at("copy_s").get<double>();
  if (const auto trace = db.find("trace"); trace && trace->is_string())
    r.timeline_trace_path = trace->get<std::string>();
  const auto timelines = db.find("timelines");
  if (timelines && !timelines->is_array())
    throw timelines->error("expected a list, got " + json_kind(timelines->raw()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::optional<node> tl;
    if (timelines && i < timelines->size() &&
        timelines->at(i).at("compute_to_copy").raw() == rows.at(i).at("compute_to_copy").raw())
      tl = timelines->at(i);
    r.ratios.push_back(ratio_from_v1(rows.at(i), tl, r.batches));
  }
  for (const auto& x : r.ratios)
    for (const auto& m : x.modes)
      if (m.depth > 3) r.depth = m.depth;
  if (r.timeline_trace_path) r.timeline_trace_ratio = traced_ratio(r.ratios);
  if (const auto trace = tables.find("trace"))
    r.trace = v1::trace_from_v1(*trace, extra.find("trace"));
  return r;
}

}  // namespace gpu_basics::lessons

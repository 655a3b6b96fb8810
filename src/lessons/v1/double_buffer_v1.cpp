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
using v1::member_of;
using v1::title_of;

constexpr const char* kTable = labels::kDoubleBufferTable;

/// batches and batch bytes from the title, where extra.double_buffer did not keep them.
void sizes_from_title(const nlohmann::json& t, double_buffer_result& r) {
  static const std::regex re(R"(Double-buffering: ([0-9]+) batches of ([^(]+) \(pinned\))");
  const std::string title = title_of(t);
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

std::optional<double_buffer_result> double_buffer_from_v1(const nlohmann::json& block) {
  const auto& tables = block.at("tables");
  if (!tables.contains(kTable)) return std::nullopt;
  const auto& t = tables.at(kTable);
  const nlohmann::json extra = extra_of(block);
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
    r.trace = schema_v1::trace_from_v1(tables.at("trace"), member_of(extra, "trace"));
  return r;
}

}  // namespace gpu_basics::lessons

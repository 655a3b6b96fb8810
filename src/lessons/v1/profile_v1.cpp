// Reading the profile lesson's schema-1 tables (titles, rows, notes) and extras (matmul, NVML
// samples, trace) back into a profile_result.
#include <algorithm>
#include <cmath>
#include <regex>

#include "../table_labels.hpp"
#include "common.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/units.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

namespace {

using labels::kTimingRows;
using v1::extra_of;
using v1::node;
using v1::notes_of;
using v1::nullable_number;
using v1::number_in;
using v1::rows_of;
using v1::title_of;

timing_methods_result timing_from_v1(const node& t) {
  timing_methods_result r;
  static const std::regex re(R"(an integer kernel over (.+), median\))");
  std::smatch m;
  const std::string title = title_of(t);
  if (std::regex_search(title, m, re)) r.bytes = parse_byte_size(std::string(m[1]));
  for (const auto& row : rows_of(t)) {
    const auto method = row.at("method").get<std::string>();
    bool known = false;
    for (const auto& tr : kTimingRows)
      if (method == tr.method) {
        (r.*tr.field).median = row.at("median_s").get<double>();
        known = true;
      }
    if (!known)
      throw row.at("method").error("not a timing method of the lesson: " +
                                   quote_for_message(method));
  }
  return r;
}

key_averages_result key_averages_from_v1(const node& t) {
  key_averages_result r;
  for (const auto& row : rows_of(t)) {
    region_timing g;
    g.name = row.at("name").get<std::string>();
    g.calls = row.at("calls").get<std::uint64_t>();
    g.gpu_total_s = row.at("gpu_total_s").get<double>();
    g.gpu_min_s = row.at("gpu_min_s").get<double>();
    g.gpu_max_s = row.at("gpu_max_s").get<double>();
    g.host_total_s =
        nullable_number(row, "host_mean_s").value_or(0.0) * static_cast<double>(g.calls);
    r.regions.push_back(std::move(g));
  }
  return r;
}

void shape_from_text(const node& cell, matmul_run& x) {
  static const std::regex re(R"(^\s*([0-9]+) x ([0-9]+) x ([0-9]+)\s*$)");
  const auto s = cell.get<std::string>();
  std::smatch m;
  if (!std::regex_match(s, m, re))
    throw cell.error("expected a shape m x n x k, got " + quote_for_message(s));
  x.m = number_in<std::uint64_t>(cell, m[1]);
  x.n = number_in<std::uint64_t>(cell, m[2]);
  x.k = number_in<std::uint64_t>(cell, m[3]);
}

/// extra.matmul's entry for the run, where schema 1 kept one.
std::optional<node> matmul_extra(const node& extra, const matmul_run& x) {
  const auto all = extra.find("matmul");
  if (!all || !all->is_array()) return std::nullopt;
  for (const auto& e : *all)
    if (e.value("precision", std::string()) == x.precision &&
        e.value("m", std::uint64_t{0}) == x.m && e.value("n", std::uint64_t{0}) == x.n &&
        e.value("k", std::uint64_t{0}) == x.k)
      return e;
  return std::nullopt;
}

matmul_run matmul_run_from_v1(const node& row, const node& extra) {
  matmul_run x;
  x.precision = row.at("precision").get<std::string>();
  shape_from_text(row.at("shape"), x);
  x.candidates = row.at("candidates").get<int>();
  x.chosen = row.at("chosen").get<int>();
  x.flops_per_s.median = row.at("median_flops_per_s").get<double>();
  x.flops_per_s.min = row.at("min_flops_per_s").get<double>();
  x.flops_per_s.max = row.at("max_flops_per_s").get<double>();
  x.peak_flops_per_s = nullable_number(row, "peak_flops_per_s");
  x.check_error = row.at("check_error").get<double>();
  if (const auto e = matmul_extra(extra, x)) {
    x.candidate_median_s = e->value("candidate_median_s", std::vector<double>{});
    x.seconds = e->value("seconds", std::vector<double>{});
    if (e->contains("flops_per_s")) x.flops_per_s = e->at("flops_per_s").get<summary>();
    x.check_error = e->value("check_max_relative_error", x.check_error);
  }
  return x;
}

matmul_result matmul_from_v1(const node& t, const node& extra) {
  matmul_result r;
  for (const auto& row : rows_of(t)) r.runs.push_back(matmul_run_from_v1(row, extra));
  static const std::regex re(R"(The heuristic proposes up to ([0-9]+) algorithms)");
  for (const auto& text : notes_of(t)) {
    std::smatch m;
    if (std::regex_search(text, m, re)) r.max_candidates = number_in<int>(t.at("notes"), m[1]);
  }
  return r;
}

nvml_metric_row metric_from_v1(const node& row) {
  nvml_metric_row m;
  m.metric = row.at("metric").get<std::string>();
  m.status = row.at("status").get<std::string>();
  double scale = 1.0;
  const std::string gib = " (GiB)";
  if (m.metric.size() > gib.size() &&
      m.metric.compare(m.metric.size() - gib.size(), gib.size(), gib) == 0) {
    m.metric.resize(m.metric.size() - gib.size());
    scale = static_cast<double>(kGiB);
  }
  const auto v = [&](const char* key) -> std::optional<double> {
    const auto x = nullable_number(row, key);
    if (!x) return std::nullopt;
    return *x * scale;
  };
  m.mean = v("mean");
  m.min = v("min");
  m.max = v("max");
  m.p50 = v("p50");
  m.p95 = v("p95");
  return m;
}

/// The sampler's cost from its schema-1 note (rounded figures; extra.sampler_cpu_percent exact).
void cost_from_v1(const std::string& text, const node& notes, const node& extra, nvml_sampling& s) {
  static const std::regex re(
      R"(The sampler thread used ([0-9.]+)% of one CPU core over ([0-9.]+) s: ([0-9.]+)% in ([0-9]+) reads)"
      R"(.* and ([0-9.]+)% in ([0-9]+) plain samples .* So at ([0-9]+) ms with the counter read every ([0-9.]+) s)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return;
  const auto number = [&](std::size_t i) { return number_in<double>(notes, m[i]); };
  sampler_cost c;
  c.wall_s = number(2);
  const double cpu_pct = extra.contains("sampler_cpu_percent")
                             ? extra.at("sampler_cpu_percent").get<double>()
                             : number(1);
  c.cpu_s = cpu_pct / 100.0 * c.wall_s;
  c.slow_cpu_s = number(3) / 100.0 * c.wall_s;
  c.slow_samples = number_in<std::uint64_t>(notes, m[4]);
  c.samples_taken = c.slow_samples + number_in<std::uint64_t>(notes, m[6]);
  s.cost = c;
  const double slow_ms = number(8) * 1e3;
  if (!(slow_ms >= 0 && slow_ms < 1e9)) throw notes.error("a sampling interval out of range");
  s.slow_interval_ms = static_cast<int>(std::lround(slow_ms));
}

void nvml_notes_from_v1(const node& t, const node& extra, nvml_sampling& s) {
  static const std::regex energy_ok(R"(Energy counter: ([0-9.]+) J over ([0-9.]+) s)");
  static const std::regex energy_status(R"(^- Energy counter: ([a-z_]+)\.$)");
  const std::string csv = "- All samples: ";
  for (const auto& text : notes_of(t)) {
    std::smatch m;
    if (std::regex_search(text, m, energy_ok)) {
      s.energy_status = "ok";
      s.energy_j = number_in<double>(t.at("notes"), m[1]);
      s.energy_s = number_in<double>(t.at("notes"), m[2]);
    } else if (std::regex_search(text, m, energy_status)) {
      s.energy_status = m[1];
    } else if (text.rfind(csv, 0) == 0) {
      s.samples_csv_path = text.substr(csv.size());
    } else {
      cost_from_v1(text, t.at("notes"), extra, s);
    }
  }
}

/// extra.nvml_samples ({"metrics", "samples": [{"time_s", name: value|null}]}) as series.
std::vector<sample_series> series_from_v1(const node& extra) {
  std::vector<sample_series> out;
  if (!extra.contains("nvml_samples")) return out;
  const node samples = extra.at("nvml_samples").at("samples");
  for (const char* metric : kSeriesMetrics) {
    sample_series s;
    s.metric = metric;
    for (const auto& row : samples) {
      if (!row.contains(metric) || row.at(metric).is_null()) continue;
      s.time_s.push_back(row.at("time_s").get<double>());
      s.values.push_back(row.at(metric).get<double>());
    }
    if (!s.values.empty()) out.push_back(decimate(std::move(s)));
  }
  return out;
}

void nvml_from_v1(const node& t, const node& extra, profile_result& r) {
  const node rows = rows_of(t);
  const auto columns = t.at("columns").get<std::vector<std::string>>();
  if (std::find(columns.begin(), columns.end(), "metric") == columns.end()) {
    r.nvml_status =
        rows.empty() ? std::string("unavailable") : rows.at(0).at("status").get<std::string>();
    return;
  }
  nvml_sampling s;
  static const std::regex re(R"(\(([0-9]+) samples every ([0-9]+) ms\))");
  std::smatch m;
  const std::string title = title_of(t);
  if (std::regex_search(title, m, re)) {
    s.samples = number_in<std::uint64_t>(t.at("title"), m[1]);
    s.interval_ms = number_in<int>(t.at("title"), m[2]);
  }
  for (const auto& row : rows) s.metrics.push_back(metric_from_v1(row));
  nvml_notes_from_v1(t, extra, s);
  s.series = series_from_v1(extra);
  r.nvml = std::move(s);
}

}  // namespace

profile_result profile_from_v1(const nlohmann::json& json_block) {
  const node block(json_block);
  const node tables = block.at("tables");
  if (!tables.is_object()) throw tables.error("expected an object, got " + json_kind(tables.raw()));
  const node extra = extra_of(block);
  if (!extra.is_object()) throw extra.error("expected an object, got " + json_kind(extra.raw()));
  profile_result r;
  if (tables.contains("timing_methods")) r.timing = timing_from_v1(tables.at("timing_methods"));
  if (tables.contains("key_averages"))
    r.key_averages = key_averages_from_v1(tables.at("key_averages"));
  if (tables.contains("matmul")) r.matmul = matmul_from_v1(tables.at("matmul"), extra);
  if (tables.contains("nvml")) nvml_from_v1(tables.at("nvml"), extra, r);
  if (tables.contains("trace"))
    r.trace = v1::trace_from_v1(tables.at("trace"), extra.find("trace"));
  return r;
}

}  // namespace gpu_basics::lessons

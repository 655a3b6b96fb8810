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
using v1::member_of;
using v1::notes_of;
using v1::nullable_number;
using v1::title_of;

const nlohmann::json& rows_of(const nlohmann::json& t, const char* id) {
  const auto& rows = t.at("rows");
  if (!rows.is_array())
    throw format_error(std::string("profile: the rows of \"") + id + "\" are not a list");
  return rows;
}

timing_methods_result timing_from_v1(const nlohmann::json& t) {
  timing_methods_result r;
  static const std::regex re(R"(an integer kernel over (.+), median\))");
  std::smatch m;
  const std::string title = title_of(t);
  if (std::regex_search(title, m, re)) r.bytes = parse_byte_size(std::string(m[1]));
  for (const auto& row : rows_of(t, "timing_methods")) {
    const auto method = row.at("method").get<std::string>();
    bool known = false;
    for (const auto& tr : kTimingRows)
      if (method == tr.method) {
        (r.*tr.field).median = row.at("median_s").get<double>();
        known = true;
      }
    if (!known) throw format_error("profile: unknown timing method '" + method + "'");
  }
  return r;
}

key_averages_result key_averages_from_v1(const nlohmann::json& t) {
  key_averages_result r;
  for (const auto& row : rows_of(t, "key_averages")) {
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

void shape_from_text(const std::string& s, matmul_run& x) {
  static const std::regex re(R"(^\s*([0-9]+) x ([0-9]+) x ([0-9]+)\s*$)");
  std::smatch m;
  if (!std::regex_match(s, m, re))
    throw format_error("profile: matmul shape '" + s + "' is not m x n x k");
  x.m = std::stoull(m[1]);
  x.n = std::stoull(m[2]);
  x.k = std::stoull(m[3]);
}

/// extra.matmul's entry for the run, where schema 1 kept one.
const nlohmann::json* matmul_extra(const nlohmann::json& extra, const matmul_run& x) {
  if (!extra.contains("matmul") || !extra.at("matmul").is_array()) return nullptr;
  for (const auto& e : extra.at("matmul"))
    if (e.value("precision", std::string()) == x.precision &&
        e.value("m", std::uint64_t{0}) == x.m && e.value("n", std::uint64_t{0}) == x.n &&
        e.value("k", std::uint64_t{0}) == x.k)
      return &e;
  return nullptr;
}

matmul_run matmul_run_from_v1(const nlohmann::json& row, const nlohmann::json& extra) {
  matmul_run x;
  x.precision = row.at("precision").get<std::string>();
  shape_from_text(row.at("shape").get<std::string>(), x);
  x.candidates = row.at("candidates").get<int>();
  x.chosen = row.at("chosen").get<int>();
  x.flops_per_s.median = row.at("median_flops_per_s").get<double>();
  x.flops_per_s.min = row.at("min_flops_per_s").get<double>();
  x.flops_per_s.max = row.at("max_flops_per_s").get<double>();
  x.peak_flops_per_s = nullable_number(row, "peak_flops_per_s");
  x.check_error = row.at("check_error").get<double>();
  if (const auto* e = matmul_extra(extra, x)) {
    x.candidate_median_s = e->value("candidate_median_s", std::vector<double>{});
    x.seconds = e->value("seconds", std::vector<double>{});
    if (e->contains("flops_per_s")) x.flops_per_s = e->at("flops_per_s").get<summary>();
    x.check_error = e->value("check_max_relative_error", x.check_error);
  }
  return x;
}

matmul_result matmul_from_v1(const nlohmann::json& t, const nlohmann::json& extra) {
  matmul_result r;
  for (const auto& row : rows_of(t, "matmul")) r.runs.push_back(matmul_run_from_v1(row, extra));
  static const std::regex re(R"(The heuristic proposes up to ([0-9]+) algorithms)");
  for (const auto& text : notes_of(t)) {
    std::smatch m;
    if (std::regex_search(text, m, re)) r.max_candidates = std::stoi(m[1]);
  }
  return r;
}

nvml_metric_row metric_from_v1(const nlohmann::json& row) {
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
void cost_from_v1(const std::string& text, const nlohmann::json& extra, nvml_sampling& s) {
  static const std::regex re(
      R"(The sampler thread used ([0-9.]+)% of one CPU core over ([0-9.]+) s: ([0-9.]+)% in ([0-9]+) reads)"
      R"(.* and ([0-9.]+)% in ([0-9]+) plain samples .* So at ([0-9]+) ms with the counter read every ([0-9.]+) s)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return;
  sampler_cost c;
  c.wall_s = std::stod(m[2]);
  const double cpu_pct = extra.contains("sampler_cpu_percent")
                             ? extra.at("sampler_cpu_percent").get<double>()
                             : std::stod(m[1]);
  c.cpu_s = cpu_pct / 100.0 * c.wall_s;
  c.slow_cpu_s = std::stod(m[3]) / 100.0 * c.wall_s;
  c.slow_samples = std::stoull(m[4]);
  c.samples_taken = c.slow_samples + std::stoull(m[6]);
  s.cost = c;
  s.slow_interval_ms = static_cast<int>(std::lround(std::stod(m[8]) * 1e3));
}

void nvml_notes_from_v1(const nlohmann::json& t, const nlohmann::json& extra, nvml_sampling& s) {
  static const std::regex energy_ok(R"(Energy counter: ([0-9.]+) J over ([0-9.]+) s)");
  static const std::regex energy_status(R"(^- Energy counter: ([a-z_]+)\.$)");
  const std::string csv = "- All samples: ";
  for (const auto& text : notes_of(t)) {
    std::smatch m;
    if (std::regex_search(text, m, energy_ok)) {
      s.energy_status = "ok";
      s.energy_j = std::stod(m[1]);
      s.energy_s = std::stod(m[2]);
    } else if (std::regex_search(text, m, energy_status)) {
      s.energy_status = m[1];
    } else if (text.rfind(csv, 0) == 0) {
      s.samples_csv_path = text.substr(csv.size());
    } else {
      cost_from_v1(text, extra, s);
    }
  }
}

/// extra.nvml_samples ({"metrics", "samples": [{"time_s", name: value|null}]}) as series.
std::vector<sample_series> series_from_v1(const nlohmann::json& extra) {
  std::vector<sample_series> out;
  if (!extra.contains("nvml_samples")) return out;
  const auto& samples = extra.at("nvml_samples").at("samples");
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

void nvml_from_v1(const nlohmann::json& t, const nlohmann::json& extra, profile_result& r) {
  const auto& rows = rows_of(t, "nvml");
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
    s.samples = std::stoull(m[1]);
    s.interval_ms = std::stoi(m[2]);
  }
  for (const auto& row : rows) s.metrics.push_back(metric_from_v1(row));
  nvml_notes_from_v1(t, extra, s);
  s.series = series_from_v1(extra);
  r.nvml = std::move(s);
}

profile_result profile_from_v1_tables(const nlohmann::json& block) {
  const auto& tables = block.at("tables");
  if (!tables.is_object()) throw format_error("profile: \"tables\" is not an object");
  const nlohmann::json extra = extra_of(block);
  if (!extra.is_object()) throw format_error("profile: \"extra\" is not an object");
  profile_result r;
  if (tables.contains("timing_methods")) r.timing = timing_from_v1(tables.at("timing_methods"));
  if (tables.contains("key_averages"))
    r.key_averages = key_averages_from_v1(tables.at("key_averages"));
  if (tables.contains("matmul")) r.matmul = matmul_from_v1(tables.at("matmul"), extra);
  if (tables.contains("nvml")) nvml_from_v1(tables.at("nvml"), extra, r);
  if (tables.contains("trace"))
    r.trace = schema_v1::trace_from_v1(tables.at("trace"), member_of(extra, "trace"));
  return r;
}

}  // namespace

profile_result profile_from_v1(const nlohmann::json& block) {
  try {
    return profile_from_v1_tables(block);
  } catch (const std::invalid_argument& e) {  // std::stoi and friends on a malformed number
    throw format_error(std::string("profile: a number in the schema-1 tables cannot be read: ") +
                       e.what());
  } catch (const std::out_of_range& e) {
    throw format_error(std::string("profile: a number in the schema-1 tables is out of range: ") +
                       e.what());
  }
}

}  // namespace gpu_basics::lessons

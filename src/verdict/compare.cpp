#include "gpu_basics/verdict/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics::verdict {

using nlohmann::json;

namespace {

/// Keys that hold no comparable figure: samples, timelines and their time stamps, traces,
/// NVML's utilization and power (what the GPU did, not how fast), datasheet ceilings and the
/// check's own verdicts and run time.
bool skipped(const std::string& key) {
  static const char* const kSkip[] = {"seconds",
                                      "seconds_joint",
                                      "candidate_median_s",
                                      "series",
                                      "batches",
                                      "start_s",
                                      "end_s",
                                      "trace",
                                      "nvml",
                                      "link_bytes_per_s",
                                      "hbm_bytes_per_s",
                                      "peak_flops_per_s",
                                      "bf16_peak_flops_per_s",
                                      "items",
                                      "thresholds",
                                      "elapsed_s",
                                      "environment",
                                      "health",
                                      "gpus"};
  return std::find(std::begin(kSkip), std::end(kSkip), key) != std::end(kSkip);
}

bool is_summary(const json& j) {
  return j.is_object() && j.contains("median") && j.contains("rel_spread") &&
         j["median"].is_number() && j["rel_spread"].is_number();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The unit and direction a key's name states, or nothing.
struct kind {
  const char* unit;
  bool higher_better;
};
std::optional<kind> kind_of(const std::string& key) {
  if (ends_with(key, "bytes_per_s")) return kind{"bytes/s", true};
  if (ends_with(key, "flops_per_s")) return kind{"flop/s", true};
  if (key == "fragmentation") return kind{"fraction", false};
  if (ends_with(key, "_s")) return kind{"s", false};
  return std::nullopt;
}

/// What tells an element of a list from its siblings: its naming fields, in a fixed order.
std::string identity(const json& e, std::size_t index) {
  if (!e.is_object()) return std::to_string(index);
  static const char* const kNames[] = {"shape", "precision", "op",   "direction", "memory",
                                       "name",  "label",     "kind", "metric",    "method"};
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  for (const char* k : kNames)
    if (e.contains(k) && e[k].is_string()) add(e[k].get<std::string>());
  if (e.contains("m") && e.contains("n") && e.contains("k") && e["m"].is_number_unsigned())
    add(fmt::format("{}x{}x{}", e["m"].get<std::uint64_t>(), e["n"].get<std::uint64_t>(),
                    e["k"].get<std::uint64_t>()));
  if (e.contains("bytes") && e["bytes"].is_number_unsigned())
    add(format_bytes(e["bytes"].get<std::uint64_t>()));
  if (e.contains("streams") && e["streams"].is_number_unsigned() && e["streams"].get<int>() != 1)
    add(fmt::format("{} streams", e["streams"].get<unsigned>()));
  if (e.contains("compute_to_copy") && e["compute_to_copy"].is_number())
    add(fmt::format("compute/copy {}", e["compute_to_copy"].get<double>()));
  if (e.contains("max_split_size"))
    add(e["max_split_size"].is_null() ? "max_split unlimited"
                                      : "max_split " + e["max_split_size"].dump());
  return out.empty() ? std::to_string(index) : out;
}

void walk(const json& j, const std::string& path, std::vector<figure>& out) {
  if (j.is_array()) {
    std::map<std::string, int> seen;
    for (std::size_t i = 0; i < j.size(); ++i) {
      std::string id = identity(j[i], i);
      if (const int n = seen[id]++; n > 0) id += "#" + std::to_string(n + 1);
      walk(j[i], path + "[" + id + "]", out);
    }
    return;
  }
  if (!j.is_object()) return;
  bool has_bandwidth = false;
  for (const auto& [k, v] : j.items())
    if (ends_with(k, "bytes_per_s") && !skipped(k)) has_bandwidth = true;
  for (const auto& [key, v] : j.items()) {
    if (skipped(key)) continue;
    const std::string id = path + "." + key;
    const auto k = kind_of(key);
    if (is_summary(v)) {
      if (!k || (std::string(k->unit) == "s" && has_bandwidth)) continue;
      out.push_back({id, k->unit, v["median"].get<double>(), v["rel_spread"].get<double>(),
                     k->higher_better});
    } else if (v.is_number() && k) {
      out.push_back({id, k->unit, v.get<double>(), 0.0, k->higher_better});
    } else if (v.is_object() || v.is_array()) {
      walk(v, id, out);
    }
  }
}

std::optional<std::string> gpu_of(const lessons::run_record& r, std::string* driver) {
  try {
    const auto f = lessons::facts_of(r);
    if (driver) *driver = f.device.driver_version.value_or("");
    return f.device.name;
  } catch (const format_error&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<figure> figures_of(const lessons::run_record& r) {
  std::vector<figure> out;
  for (const auto& [lesson, result] : r.results) walk(result, lesson, out);
  return out;
}

const char* to_string(change c) noexcept {
  switch (c) {
    case change::worse:
      return "worse";
    case change::same:
      return "same";
    case change::better:
      return "better";
  }
  return "?";
}

judgement judge(double base, double base_noise, double value, double value_noise,
                bool higher_better, double threshold) {
  GPU_BASICS_EXPECTS(base > 0 && std::isfinite(base) && std::isfinite(value),
                     "judge: the baseline must be a positive number and the new value finite");
  judgement j;
  j.delta = value / base - 1;
  j.tolerance = std::max({threshold, std::abs(base_noise), std::abs(value_noise)});
  if (std::abs(j.delta) <= j.tolerance)
    j.verdict = change::same;
  else
    j.verdict = (j.delta > 0) == higher_better ? change::better : change::worse;
  return j;
}

std::size_t comparison::count(change c) const {
  return static_cast<std::size_t>(std::count_if(
      rows.begin(), rows.end(), [&](const figure_verdict& v) { return v.j.verdict == c; }));
}

void ensure_comparable(const lessons::run_record& base, const std::string& base_name,
                       const lessons::run_record& next, const std::string& next_name, bool force) {
  const std::string both = base_name + " and " + next_name;
  if (base.schema_version != next.schema_version)
    throw format_error(fmt::format(
        "{}: results of schema {} and {} are not compared; rewrite the older one in the current "
        "schema with 'gpu-basics show OLD.json --json NEW.json'",
        both, base.schema_version, next.schema_version));
  if (base.command != next.command)
    throw format_error(
        fmt::format("{}: results of different commands ('{}' and '{}') are not "
                    "compared",
                    both, base.command, next.command));
  std::string d1, d2;
  const auto g1 = gpu_of(base, &d1), g2 = gpu_of(next, &d2);
  const auto major = [](const std::string& v) { return v.substr(0, v.find('.')); };
  if (!force && g1 && g2 && *g1 != *g2)
    throw format_error(
        fmt::format("refusing to compare {}: different GPU models ({} and {}); "
                    "--force compares them anyway",
                    both, *g1, *g2));
  if (!force && !d1.empty() && !d2.empty() && major(d1) != major(d2))
    throw format_error(
        fmt::format("refusing to compare {}: different driver major versions ({} "
                    "and {}); --force compares them anyway",
                    both, d1, d2));
}

comparison compare(const lessons::run_record& base, const lessons::run_record& next,
                   double threshold) {
  GPU_BASICS_EXPECTS(threshold >= 0 && threshold < 1, "compare: threshold outside [0, 1)");
  comparison c;
  c.threshold = threshold;
  const auto a = figures_of(base), b = figures_of(next);
  std::map<std::string, const figure*> by_id;
  for (const auto& f : b) by_id.emplace(f.id, &f);
  std::size_t matched = 0;
  for (const auto& f : a) {
    const auto it = by_id.find(f.id);
    if (it == by_id.end()) {
      ++c.only_in_baseline;
      continue;
    }
    ++matched;
    if (!(f.value > 0) || !std::isfinite(it->second->value)) continue;  // nothing to scale by
    c.rows.push_back({f, *it->second,
                      judge(f.value, f.noise, it->second->value, it->second->noise, f.higher_better,
                            threshold)});
  }
  c.only_in_new = b.size() - matched;
  const auto gain = [](const figure_verdict& v) {
    return v.base.higher_better ? v.j.delta : -v.j.delta;
  };
  std::stable_sort(c.rows.begin(), c.rows.end(), [&](const auto& x, const auto& y) {
    if (x.j.verdict != y.j.verdict) return x.j.verdict < y.j.verdict;
    return gain(x) < gain(y);
  });
  return c;
}

std::string format_value(double v, const std::string& unit) {
  if (unit == "bytes/s") return fmt::format("{:.4g} GB/s", v * 1e-9);
  if (unit == "flop/s") return fmt::format("{:.4g} TFLOP/s", v * 1e-12);
  if (unit == "fraction") return fmt::format("{:.3g}%", v * 100);
  if (unit == "s") {
    if (v >= 1) return fmt::format("{:.4g} s", v);
    if (v >= 1e-3) return fmt::format("{:.4g} ms", v * 1e3);
    if (v >= 1e-6) return fmt::format("{:.4g} us", v * 1e6);
    return fmt::format("{:.4g} ns", v * 1e9);
  }
  return fmt::format("{:.4g} {}", v, unit);
}

presentation::table comparison_table(const comparison& c, const std::string& title) {
  presentation::table t;
  t.id = "compare";
  t.title = title;
  t.columns = {{"figure", "figure"},
               {"baseline", "baseline"},
               {"new", "new"},
               {"change", "change %", 1, 1},
               {"tolerance", "same within %", 1, 1},
               {"verdict", "verdict"}};
  for (const auto& r : c.rows)
    t.add_row({r.base.id, format_value(r.base.value, r.base.unit),
               format_value(r.next.value, r.next.unit), r.j.delta * 100, r.j.tolerance * 100,
               std::string(to_string(r.j.verdict))});
  t.notes.push_back(fmt::format(
      "{} worse, {} same, {} better. Same when |change| <= max({:.1f}%, the IQR/median noise of "
      "either run); otherwise better or worse by the figure's direction (higher bandwidth and "
      "FLOP/s, lower times).",
      c.count(change::worse), c.count(change::same), c.count(change::better), c.threshold * 100));
  if (c.only_in_baseline || c.only_in_new)
    t.notes.push_back(
        fmt::format("{} figure(s) only in the baseline and {} only in the new run "
                    "were not compared.",
                    c.only_in_baseline, c.only_in_new));
  return t;
}

json to_json(const comparison& c) {
  json rows = json::array();
  for (const auto& r : c.rows)
    rows.push_back({{"id", r.base.id},
                    {"unit", r.base.unit},
                    {"higher_better", r.base.higher_better},
                    {"baseline", r.base.value},
                    {"baseline_noise", r.base.noise},
                    {"new", r.next.value},
                    {"new_noise", r.next.noise},
                    {"delta", r.j.delta},
                    {"tolerance", r.j.tolerance},
                    {"verdict", to_string(r.j.verdict)}});
  return {{"threshold", c.threshold},
          {"worse", c.count(change::worse)},
          {"same", c.count(change::same)},
          {"better", c.count(change::better)},
          {"only_in_baseline", c.only_in_baseline},
          {"only_in_new", c.only_in_new},
          {"figures", rows}};
}

}  // namespace gpu_basics::verdict

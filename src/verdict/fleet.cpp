#include "gpu_basics/verdict/fleet.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/verdict/compare.hpp"

namespace gpu_basics::verdict {

using nlohmann::json;

namespace {

/// A node's key figure and whether it is a gate (compare.hpp's class_of: backed by samples).
struct key_value {
  double value;
  bool gate;
};

struct key_figure {
  const char* name;
  double scale;
  std::optional<key_value> (*get)(const lessons::check_result&);
};

bool is_gate(const summary& s, const std::vector<double>& seconds, const char* unit) {
  return class_of(json(s), json(seconds), unit, nullptr, nullptr) == figure_class::gate;
}

std::optional<key_value> bandwidth(const std::optional<lessons::copy_figure>& c) {
  if (!c || !(c->bandwidth_bytes_per_s.median > 0)) return std::nullopt;
  return key_value{c->bandwidth_bytes_per_s.median,
                   is_gate(c->bandwidth_bytes_per_s, c->seconds, "bytes/s")};
}

/// A D2D copy as read + write, as `check` judges it (units.hpp, Note [D2D convention]).
std::optional<key_value> d2d_read_write(const std::optional<lessons::copy_figure>& c) {
  auto v = bandwidth(c);
  if (v) v->value = gpu_basics::d2d_read_write(v->value);
  return v;
}

const key_figure kFigures[] = {
    {"H2D GB/s", 1e-9, [](const lessons::check_result& c) { return bandwidth(c.h2d); }},
    {"D2H GB/s", 1e-9, [](const lessons::check_result& c) { return bandwidth(c.d2h); }},
    {"H2D+D2H GB/s", 1e-9,
     [](const lessons::check_result& c) { return bandwidth(c.bidirectional); }},
    {"D2D GB/s (read + write)", 1e-9,
     [](const lessons::check_result& c) { return d2d_read_write(c.d2d); }},
    {"bf16 TFLOP/s", 1e-12,
     [](const lessons::check_result& c) -> std::optional<key_value> {
       if (!c.gemm || !(c.gemm->flops_per_s.median > 0)) return std::nullopt;
       return key_value{c.gemm->flops_per_s.median,
                        is_gate(c.gemm->flops_per_s, c.gemm->seconds, "flop/s")};
     }},
};

double median_sorted(const std::vector<double>& v) {
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::size_t fleet_result::degraded() const {
  return static_cast<std::size_t>(std::count_if(
      rows.begin(), rows.end(), [](const fleet_row& r) { return r.verdict == "degraded"; }));
}

std::optional<std::pair<double, double>> median_mad(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const double m = median_sorted(v);
  for (auto& x : v) x = std::abs(x - m);
  std::sort(v.begin(), v.end());
  return std::pair{m, median_sorted(v)};
}

fleet_result analyze_fleet(const std::vector<fleet_node>& nodes) {
  if (nodes.empty()) throw format_error("the fleet is empty: give one results file per node");
  fleet_result f;
  for (const auto& k : kFigures) {
    f.figures.emplace_back(k.name);
    std::vector<double> values;
    for (const auto& n : nodes)
      if (const auto v = k.get(n.check); v && v->gate) values.push_back(v->value * k.scale);
    const auto mm = median_mad(values);
    f.medians.push_back(mm ? std::optional<double>(mm->first) : std::nullopt);
    f.mads.push_back(mm ? std::optional<double>(mm->second) : std::nullopt);
  }
  for (const auto& n : nodes) {
    fleet_row row;
    row.node = n.name;
    row.gpu = n.check.gpu;
    row.link = n.check.link_generation && n.check.link_width
                   ? fmt::format("Gen{} x{}", *n.check.link_generation, *n.check.link_width)
                   : "n/a";
    row.check_status = lessons::overall_status(n.check.items);
    std::vector<std::string> why;
    for (std::size_t i = 0; i < std::size(kFigures); ++i) {
      fleet_cell cell;
      if (const auto v = kFigures[i].get(n.check)) {
        cell.value = v->value * kFigures[i].scale;
        cell.gate = v->gate;
        const auto m = f.medians[i];
        const double s = m ? std::max(kMadToSigma * *f.mads[i], kFleetNoiseFloor * *m) : 0;
        if (cell.gate && s > 0) {  // only gates are judged
          cell.score = (*m - *cell.value) / s;
          cell.outlier = *cell.score > kFleetOutlierScore;
        }
        if (cell.outlier)
          why.push_back(fmt::format("{} {:.4g} vs fleet median {:.4g} (score {:.1f})",
                                    kFigures[i].name, *cell.value, *m, *cell.score));
      }
      row.cells.push_back(cell);
    }
    for (const auto& it : n.check.items)
      if (it.status == "FAIL") why.push_back(it.name + " FAIL: " + it.hint);
    const bool outlier = std::any_of(row.cells.begin(), row.cells.end(),
                                     [](const fleet_cell& c) { return c.outlier; });
    row.verdict = outlier || row.check_status == "FAIL" ? "degraded"
                  : row.check_status == "WARN"          ? "warn"
                                                        : "ok";
    for (const auto& w : why) row.why += (row.why.empty() ? "" : "; ") + w;
    f.rows.push_back(std::move(row));
  }
  return f;
}

presentation::table fleet_table(const fleet_result& f) {
  presentation::table t;
  t.id = "fleet";
  t.title = fmt::format("Fleet: {} node(s), {} degraded", f.rows.size(), f.degraded());
  t.columns = {{"node", "node"}, {"gpu", "GPU"}, {"link", "link"}};
  for (std::size_t i = 0; i < f.figures.size(); ++i)
    t.columns.push_back({"figure" + std::to_string(i), f.figures[i]});
  t.columns.push_back({"check", "check"});
  t.columns.push_back({"verdict", "verdict"});
  t.columns.push_back({"why", "why"});
  for (const auto& r : f.rows) {
    std::vector<presentation::value> row{r.node, r.gpu, r.link};
    for (const auto& c : r.cells)
      row.emplace_back(
          c.value ? fmt::format("{:.1f}{}", *c.value, c.outlier ? " !" : (c.gate ? "" : " (i)"))
                  : std::string("n/a"));
    row.emplace_back(r.check_status);
    row.emplace_back(r.verdict);
    row.emplace_back(r.why);
    t.add_row(std::move(row));
  }
  std::string med;
  for (std::size_t i = 0; i < f.figures.size(); ++i)
    if (f.medians[i])
      med += fmt::format("{}{} {:.4g} (MAD {:.3g})", med.empty() ? "" : ", ", f.figures[i],
                         *f.medians[i], *f.mads[i]);
  t.notes.push_back("Fleet medians: " + med + ".");
  t.notes.push_back(fmt::format(
      "'!' marks an outlier: (median - value) / max({} MAD, {:.0f}% of the median) > {} (slow side "
      "only). A node is degraded when a figure is an outlier or a check FAILs. Only gates are "
      "judged: a figure saved without its samples is informational, marked '(i)', and left out "
      "of the medians.",
      kMadToSigma, kFleetNoiseFloor * 100, kFleetOutlierScore));
  return t;
}

json to_json(const fleet_result& f) {
  json nodes = json::array();
  for (const auto& r : f.rows) {
    json values = json::array(), scores = json::array(), outliers = json::array(),
         gates = json::array();
    for (const auto& c : r.cells) {
      gates.push_back(c.gate);
      values.push_back(c.value ? json(*c.value) : json(nullptr));
      scores.push_back(c.score ? json(*c.score) : json(nullptr));
      outliers.push_back(c.outlier);
    }
    nodes.push_back({{"node", r.node},
                     {"gpu", r.gpu},
                     {"link", r.link},
                     {"check", r.check_status},
                     {"values", values},
                     {"scores", scores},
                     {"outliers", outliers},
                     {"gates", gates},
                     {"verdict", r.verdict},
                     {"why", r.why}});
  }
  json med = json::array(), mad = json::array();
  for (std::size_t i = 0; i < f.figures.size(); ++i) {
    med.push_back(f.medians[i] ? json(*f.medians[i]) : json(nullptr));
    mad.push_back(f.mads[i] ? json(*f.mads[i]) : json(nullptr));
  }
  return {{"figures", f.figures},
          {"medians", med},
          {"mads", mad},
          {"outlier_score", kFleetOutlierScore},
          {"noise_floor", kFleetNoiseFloor},
          {"nodes", nodes},
          {"degraded", f.degraded()}};
}

}  // namespace gpu_basics::verdict

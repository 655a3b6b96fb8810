// The advice page (report/advice.hpp).
#include "gpu_basics/report/advice.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics::report {

namespace {

using detail::chart;
using nlohmann::json;

std::string conf_label(const std::string& conf) {
  return conf.empty() ? "defaults" : conf;
}

/// A linear axis of plain numbers (trace events).
json count_axis(const std::string& title) {
  json a = detail::axis(title, "events");
  a["type"] = "linear";
  a["gbUnit"] = "";
  return a;
}

/// The most points a line of the usage chart has (advise writes 1500 at most).
constexpr std::size_t kMaxCurvePoints = 4000;

/// Reserved and allocated over the trace, the defaults solid and the recommendation dashed; the
/// fit limits as lines; each out-of-memory point under a limit marked.
chart usage_chart(const advice& a) {
  chart c{"advice-usage", "Reserved and allocated over the trace", {}};
  c.config = detail::base_config("line", c.title, count_axis("trace event"),
                                 detail::axis("memory", "bytes"));
  c.height = "tall";
  auto& ds = c.config["data"]["datasets"];
  std::vector<const policy_detail*> shown = {&a.defaults};
  if (a.recommendation.index != a.defaults.index) shown.push_back(&a.recommendation);
  for (std::size_t run = 0; run < shown.size(); ++run) {
    const policy_detail& d = *shown[run];
    const std::string who = run == 0 ? "defaults" : "recommended";
    std::vector<std::pair<double, double>> res, all;
    // Each point costs a JSON object in the page: a curve longer than advise writes (read from a
    // file) is drawn as the maximum of each run of `step` points, as advise takes its points.
    const std::size_t n = d.curve.event.size();
    const std::size_t step = (n + kMaxCurvePoints - 1) / kMaxCurvePoints;
    for (std::size_t i = 0; i < n; i += step) {
      const std::size_t end = std::min(n, i + step);
      const auto top = [&](const std::vector<std::size_t>& v) {
        return static_cast<double>(*std::max_element(v.begin() + static_cast<std::ptrdiff_t>(i),
                                                     v.begin() + static_cast<std::ptrdiff_t>(end)));
      };
      const auto x = static_cast<double>(d.curve.event[end - 1]);
      res.emplace_back(x, top(d.curve.reserved));
      all.emplace_back(x, top(d.curve.allocated));
    }
    for (auto* series : {&res, &all}) {
      json line =
          detail::line_dataset(fmt::format("{} ({}): {}", who, conf_label(a.policies[d.index].conf),
                                           series == &res ? "reserved" : "allocated"),
                               detail::color(series == &res ? 0 : 1), run, *series);
      line["pointRadius"] = 0;
      line["borderWidth"] = 1.5;
      ds.push_back(std::move(line));
    }
    json ooms = json::array();
    for (const auto& f : a.policies[d.index].fits)
      if (f.oom)
        ooms.push_back(
            {{"x", static_cast<double>(f.oom->event)}, {"y", static_cast<double>(f.limit)}});
    if (!ooms.empty())
      ds.push_back({{"type", "scatter"},
                    {"label", who + ": out of memory under a limit"},
                    {"data", std::move(ooms)},
                    {"borderColor", detail::color(3)},
                    {"backgroundColor", detail::color(3)},
                    {"pointStyle", run == 0 ? "crossRot" : "triangle"},
                    {"pointRadius", 7},
                    {"borderWidth", 2}});
  }
  // Each limit's label sits above its line at the right end; a limit close below the previous
  // one (within a label's height, about 8% of the axis) moves its label a quarter of the width
  // to the left, so that labels of close limits stand side by side instead of over each other.
  double top = 0;
  for (const auto* d : shown)
    for (const auto r : d->curve.reserved) top = std::max(top, static_cast<double>(r));
  for (const auto l : a.fit_limits) top = std::max(top, static_cast<double>(l));
  std::vector<std::size_t> order(a.fit_limits.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t l, std::size_t r) { return a.fit_limits[l] > a.fit_limits[r]; });
  std::size_t slot = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::size_t k = order[i];
    const auto limit = static_cast<double>(a.fit_limits[k]);
    const bool close =
        i > 0 && static_cast<double>(a.fit_limits[order[i - 1]]) - limit < 0.08 * top * 1.1;
    slot = close ? slot + 1 : 0;
    json line =
        detail::reference_line(limit, fmt::format("--fit {}", a.fit_label(k)), detail::color(4));
    line["label"]["position"] = fmt::format("{}%", 100 - 25 * (slot % 4));
    detail::annotate(c.config, fmt::format("fit{}", k), std::move(line));
  }
  return c;
}

/// The stranded bytes as stacked bars: one bar per policy and moment (peak reserved, peak
/// allocated), one segment per cause.
chart stranded_chart(const advice& a) {
  struct bar {
    std::string label;
    const stranded_split* split;
  };
  std::vector<bar> bars;
  for (const auto* d : {&a.defaults, &a.recommendation}) {
    if (d == &a.recommendation && a.recommendation.index == a.defaults.index) break;
    const std::string who = fmt::format("{} ({})", d == &a.defaults ? "defaults" : "recommended",
                                        conf_label(a.policies[d->index].conf));
    bars.push_back({who + " at peak reserved", &d->stranded});
    bars.push_back({who + " at peak allocated", &d->stranded_at_allocated});
  }
  json categories = json::array();
  for (const auto& b : bars) categories.push_back(b.label);
  chart c = detail::horizontal_bars(
      "advice-stranded", "Reserved but free at the peaks, by why the request could not use it",
      detail::axis("bytes", "bytes"), detail::axis("policy", ""));
  c.height = bars.size() > 2 ? "normal" : "short";
  c.config["data"]["labels"] = categories;
  c.config["options"]["scales"]["x"]["stacked"] = true;
  c.config["options"]["scales"]["y"]["stacked"] = true;
  std::size_t series = 0;
  for (auto cause :
       {stranded_cause::other_stream, stranded_cause::other_pool, stranded_cause::expandable_pages,
        stranded_cause::segment_rest, stranded_cause::max_split, stranded_cause::too_small,
        stranded_cause::unexplained}) {
    std::vector<std::optional<double>> values;
    bool any = false;
    for (const auto& b : bars) {
      const std::size_t n = b.split->bytes_of(cause);
      any = any || n > 0;
      values.emplace_back(static_cast<double>(n));
    }
    if (!any) continue;
    c.config["data"]["datasets"].push_back(
        detail::bar_dataset(std::string(to_string(cause)), detail::color(series++), 0, values));
  }
  std::vector<std::optional<double>> rounding;
  for (const auto& b : bars) rounding.emplace_back(static_cast<double>(b.split->rounding_bytes()));
  json r = detail::bar_dataset("rounding inside allocated blocks (beside the split)",
                               detail::color(series), 1, rounding);
  r["stack"] = "rounding";
  c.config["data"]["datasets"].push_back(std::move(r));
  return c;
}

}  // namespace

bool is_advice(const nlohmann::json& j) noexcept {
  return j.is_object() && j.contains("command") && j["command"].is_string() &&
         j["command"].get_ref<const std::string&>() == "advise";
}

std::string render_advice_html(const advice& a) {
  using detail::escape;
  const auto tables = advice_tables(a);
  json specs = json::array();
  std::string body;
  const auto figure = [&](const std::string& id, const std::string& title, const chart& c,
                          const presentation::table& t) {
    body += detail::chart_figure_html(id, title, c, t, specs);
  };
  const auto table_named = [&](const std::string& id) -> const presentation::table* {
    for (const auto& t : tables)
      if (t.id == id) return &t;
    return nullptr;
  };
  body += "<section id=\"advice\">\n<h2>advice</h2>\n";
  if (const auto* t = table_named("advice")) {
    body += detail::table_html(*t, "");
    body += "<div class=\"notes\">" + detail::notes_html(*t) + "</div>\n";
  }
  body += "</section>\n<section id=\"fit\">\n<h2>will it fit</h2>\n";
  presentation::table usage_notes;
  if (const auto* t = table_named("fit")) usage_notes = *t;
  if (usage_notes.columns.empty()) {
    usage_notes.id = "fit";
    usage_notes.title = "No --fit limit was given";
    usage_notes.columns = {{"note", "note"}};
  }
  figure("fit-figure", "Reserved and allocated over the trace", usage_chart(a), usage_notes);
  body += "</section>\n<section id=\"stranded\">\n<h2>stranded memory</h2>\n";
  if (const auto* t = table_named("stranded"))
    figure("stranded-figure", "Where the free memory is at peak", stranded_chart(a), *t);
  if (const auto* t = table_named("growth")) {
    body += "<h3>" + escape(t->title) + "</h3>\n" + detail::table_html(*t, "");
    body += "<div class=\"notes\">" + detail::notes_html(*t) + "</div>\n";
  }
  body += "</section>\n<section id=\"policies\">\n<h2>policies</h2>\n";
  if (const auto* t = table_named("policies")) {
    body += detail::table_html(*t, "");
    body += "<div class=\"notes\">" + detail::notes_html(*t) + "</div>\n";
  }
  body += "</section>\n";
  const std::string header = "<header>\n<h1>gpu-basics advise</h1>\n<ul class=\"runs\"><li><b>" +
                             escape(a.file) + "</b>: device " + std::to_string(a.device) + ", " +
                             std::to_string(a.trace_events) +
                             " trace events</li></ul>\n</header>\n";
  const std::string nav =
      "<a href=\"#advice\">advice</a><a href=\"#fit\">will it fit</a><a href=\"#stranded\">"
      "stranded memory</a><a href=\"#policies\">policies</a>";
  return detail::page_html("gpu-basics advise · " + a.file, header, nav, body, specs);
}

}  // namespace gpu_basics::report

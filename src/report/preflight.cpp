// The pre-flight page (report/preflight.hpp).
#include "gpu_basics/report/preflight.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics::report {

namespace {

using detail::chart;
using nlohmann::json;

/// The batch axis: plain numbers, logarithmic (the points are spread geometrically).
json batch_axis() {
  json a = detail::axis("batch size", "batch", true);
  a["gbUnit"] = "";
  return a;
}

/// "defaults", or "recommended (CONF)" ("recommended (the defaults)" where it is them).
std::string who(const std::string& which, const std::string& policy) {
  if (which == "defaults") return which;
  return which + " (" + (policy.empty() ? std::string("the defaults") : printable(policy)) + ")";
}

/// Peak reserved against the batch, one line per policy (the defaults solid, the recommendation
/// dashed); the limit as a horizontal line and each policy's largest batch as a vertical one.
chart peaks_chart(const preflight_report& r) {
  chart c{"preflight-peaks", "Predicted peak reserved against the batch size", {}};
  c.config =
      detail::base_config("line", c.title, batch_axis(), detail::axis("peak reserved", "bytes"));
  c.height = "tall";
  const auto& points = r.curve.empty() ? r.predictions : r.curve;
  for (std::size_t w = 0; w < 2; ++w) {
    std::vector<std::pair<double, double>> xy;
    std::string label;
    for (std::size_t j = w; j < points.size(); j += 2) {
      xy.emplace_back(static_cast<double>(points[j].batch),
                      static_cast<double>(points[j].peak_reserved));
      label = who(points[j].which, points[j].policy) + ": peak reserved";
    }
    std::sort(xy.begin(), xy.end());
    json line = detail::line_dataset(label, detail::color(w), w, xy);
    line["borderWidth"] = 2;
    // The recommendation over the defaults: its dashes show where the two lines are one.
    line["order"] = -static_cast<int>(w);
    c.config["data"]["datasets"].push_back(std::move(line));
  }
  if (!r.fit) return c;
  json limit = detail::reference_line(static_cast<double>(r.fit->limit),
                                      "--fit " + format_bytes(r.fit->limit), detail::color(4));
  limit["label"]["position"] = "start";
  detail::annotate(c.config, "limit", std::move(limit));
  // Each policy's largest batch: one line where both are the same batch. Its label stands above
  // the plot area at the top of its line, where no curve runs (the curves cross the line near the
  // limit); where the two differ, the recommendation's label a row above the defaults' (so that
  // close batches' labels do not meet). The title leaves the rows free.
  const auto& d = r.fit->defaults;
  const auto& rec = r.fit->recommended;
  constexpr int row = 18;  // px: an 11 px label on its ground, and a gap
  int rows = 0;
  const auto mark = [&](const std::string& key, std::size_t batch, const std::string& text,
                        std::size_t colour) {
    json v = detail::reference_line(static_cast<double>(batch), fmt::format("{}: {}", text, batch),
                                    detail::color(colour), true);
    ++rows;
    v["label"]["position"] = "end";
    v["label"]["yAdjust"] = -(row * rows - row / 2 + 2);
    detail::annotate(c.config, key, std::move(v));
  };
  if (d && rec && *d == *rec && *d > 0) {
    mark("largest", *d, "largest batch (both)", 0);
  } else {
    if (d && *d > 0) mark("largest_defaults", *d, "largest batch (defaults)", 0);
    if (rec && *rec > 0) mark("largest_recommended", *rec, "largest batch (recommended)", 1);
  }
  c.config["options"]["plugins"]["title"]["padding"] = {{"top", 10}, {"bottom", 10 + row * rows}};
  c.config["options"]["plugins"]["annotation"]["clip"] = false;  // the labels above the area
  return c;
}

const presentation::table* named(const std::vector<presentation::table>& tables,
                                 const std::string& id) {
  for (const auto& t : tables)
    if (t.id == id) return &t;
  return nullptr;
}

}  // namespace

std::string render_preflight_html(const preflight_report& r) {
  using detail::escape;
  const auto tables = preflight_tables(r);
  json specs = json::array();
  std::string body = "<section id=\"peaks\">\n<h2>predicted peaks</h2>\n";
  presentation::table under;  // the predictions, with what the chart draws among its notes
  if (const auto* t = named(tables, "preflight.predictions")) under = *t;
  const std::size_t points = (r.curve.empty() ? r.predictions.size() : r.curve.size()) / 2;
  under.notes.push_back(fmt::format(
      "The chart: peak reserved at {} batch sizes (the recorded ones, each `--at`{}), each "
      "replayed without a limit. Under the limit PyTorch frees its cache and retries, so a "
      "batch drawn above the limit may still fit; the largest batch is the replay under it.",
      points, r.fit ? ", and up to a quarter past the largest batch that fits" : ""));
  const chart c = peaks_chart(r);
  body += detail::chart_figure_html("peaks-figure", c.title, c, under, specs);
  body += "</section>\n";
  for (const char* id : {"preflight.largest_batch", "preflight.recordings"})
    if (const auto* t = named(tables, id)) {
      const std::string anchor = std::string(id).substr(std::string("preflight.").size());
      body += "<section id=\"" + anchor + "\">\n<h2>" +
              (anchor == "largest_batch" ? "largest batch" : "recordings") + "</h2>\n" +
              detail::table_html(*t, "") + "<div class=\"notes\">" + detail::notes_html(*t) +
              "</div>\n</section>\n";
    }
  std::string runs;
  for (std::size_t i = 0; i < r.files.size(); ++i)
    runs += "<li><b>" + escape(printable(r.files[i])) + "</b>: batch " +
            std::to_string(r.batches[i]) + ", " + std::to_string(r.events[i]) +
            " allocs and frees</li>";
  const std::string header =
      "<header>\n<h1>gpu-basics preflight</h1>\n<ul class=\"runs\">" + runs + "</ul>\n</header>\n";
  std::string nav = "<a href=\"#peaks\">predicted peaks</a>";
  if (r.fit) nav += "<a href=\"#largest_batch\">largest batch</a>";
  nav += "<a href=\"#recordings\">recordings</a>";
  std::string title = "gpu-basics preflight";
  if (!r.files.empty()) title += " · " + printable(r.files.back());
  return detail::page_html(title, header, nav, body, specs);
}

}  // namespace gpu_basics::report

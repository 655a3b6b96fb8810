// The report's model: figures (one or more charts, with the tables whose numbers and notes go
// under them), built per lesson from the runs' typed results. Chart configurations are Chart.js
// configurations as JSON; the page's script (assets/report.js) only adds formatters and colours
// of the theme. Internal to the report module.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/report/report.hpp"

namespace gpu_basics::report::detail {

using nlohmann::json;

/// One Chart.js chart. `tooltip` tells the page how to word a hovered value: "y" (the value axis
/// is y), "x" (horizontal bars), "range" (floating bars: start to end), "matrix" (heatmap cells).
struct chart {
  std::string id;
  std::string title;
  json config;
  std::string tooltip = "y";
  std::string height = "normal";  // "normal", "short", "tall"
};

/// A figure: its charts side by side, then the notes and numbers of `tables` (the lesson's table
/// ids) of every run.
struct figure {
  std::string id;
  std::string lesson;
  std::string title;
  std::vector<chart> charts;
  std::vector<std::string> tables;
};

/// A lesson's result in one run: the run's index (its line style) and label.
template <class Result>
struct run_result {
  std::size_t index = 0;
  std::string label;  // prefix for series names; empty with a single run
  Result result;
  std::string source;  // the file it was read from (the run's label where none), for messages
};

/// Every run's result of `lesson`, typed; runs without it are skipped.
/// @throws format_error when a result cannot be read as Result.
template <class Result>
std::vector<run_result<Result>> results_of(const std::vector<run_input>& runs,
                                           const std::string& lesson) {
  std::vector<run_result<Result>> out;
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (const auto& [name, j] : runs[i].record.results) {
      if (name != lesson) continue;
      const std::string& source =
          runs[i].record.source.empty() ? runs[i].label : runs[i].record.source;
      try {
        out.push_back({i, runs.size() > 1 ? runs[i].label : "",
                       lessons::result_from_json<Result>(j, lesson), source});
      } catch (const json_path_error& e) {
        throw format_error(source + ": " + e.what());
      }
    }
  return out;
}

// ---- chart building blocks (chart.cpp) ---------------------------------------------------

/// A colour-blind-safe palette (Okabe and Ito), by series.
[[nodiscard]] std::string color(std::size_t series);
/// `hex` ("#0072b2") with an alpha: "rgba(0,114,178,0.5)".
[[nodiscard]] std::string with_alpha(const std::string& hex, double alpha);
/// The name of a series in run `label`'s colours: "label: name", or `name` alone.
[[nodiscard]] std::string series_name(const std::string& label, const std::string& name);

/// `title` naming `unit` ("s" for "seconds", "\u00d7" for "x"), unless it does already.
[[nodiscard]] std::string titled_with_unit(const std::string& title, const std::string& unit);
/// An axis: title (with its unit), the unit the page formats ticks and tooltips with ("bytes",
/// "seconds", or a suffix such as "GB/s"), linear or logarithmic; without a unit, categories.
[[nodiscard]] json axis(const std::string& title, const std::string& unit, bool log = false);
/// A chart of `type` ("line", "bar", "matrix") with the title, the x and y axes, the legend shown
/// when there are several series, no animation (prints and screenshots see the final frame).
[[nodiscard]] json base_config(const std::string& type, const std::string& title, json x, json y);
/// A horizontal bar chart of `id` and `title`: bar lengths along `values` (the x axis), one row
/// per category of `categories` (the y axis); hovered values are worded as x.
[[nodiscard]] chart horizontal_bars(std::string id, std::string title, json values,
                                    json categories);
/// A line through (x, y) points; runs after the first are dashed.
[[nodiscard]] json line_dataset(const std::string& label, const std::string& colour,
                                std::size_t run, const std::vector<std::pair<double, double>>& xy);
/// Bars; runs after the first are lighter and outlined.
[[nodiscard]] json bar_dataset(const std::string& label, const std::string& colour, std::size_t run,
                               const std::vector<std::optional<double>>& values);
/// A labelled horizontal (or vertical, with `vertical`) reference line for the annotation plugin.
[[nodiscard]] json reference_line(double value, const std::string& label, const std::string& colour,
                                  bool vertical = false);
/// Adds `annotation` under options.plugins.annotation.annotations[key].
void annotate(json& config, const std::string& key, json annotation);

// ---- the page (page.cpp) -----------------------------------------------------------------

/// `s` with HTML's special characters escaped.
[[nodiscard]] std::string escape(std::string_view s);
/// A table as HTML, captioned with its title (after `run_label`, when given).
[[nodiscard]] std::string table_html(const presentation::table& t, const std::string& run_label);
/// A table's notes as a list ("" without notes); `code` spans kept.
[[nodiscard]] std::string notes_html(const presentation::table& t);
/// One chart (`id`, `title`) with `t`'s notes beside it and its numbers under it, as the pages of
/// advise and replay show their figures; the chart's spec is appended to `specs`.
[[nodiscard]] std::string chart_figure_html(const std::string& id, const std::string& title,
                                            const chart& c, const presentation::table& t,
                                            json& specs);
/// JSON safe inside a <script> element.
[[nodiscard]] std::string script_json(const json& j);
/// The whole page: `header`, the navigation links `nav`, `body`, and the charts `specs`
/// ([{"id", "title", "tooltip", "config"}]) drawn into their canvases by the page's script.
[[nodiscard]] std::string page_html(const std::string& title, const std::string& header,
                                    const std::string& nav, const std::string& body,
                                    const json& specs);

// ---- the summary (summary.cpp) -----------------------------------------------------------

/// A section of the page and its figures (id, title), for the summary's links.
struct section_links {
  std::string id;
  std::string name;
  std::vector<std::pair<std::string, std::string>> figures;
};
/// The summary at the top of the page: each run's check verdict where its results carry one, the
/// headline figures (pinned H2D and D2H, both at once, D2D, bf16 GEMM) as `check` reads them with
/// their share of the ceiling, the change between two runs, and links to `contents`.
[[nodiscard]] std::string summary_html(const std::vector<run_input>& runs,
                                       const std::vector<section_links>& contents);

// ---- figures per lesson ------------------------------------------------------------------

[[nodiscard]] std::vector<figure> transfer_figures(const std::vector<run_input>& runs);
[[nodiscard]] std::vector<figure> memory_figures(const std::vector<run_input>& runs);
[[nodiscard]] std::vector<figure> profile_figures(const std::vector<run_input>& runs);
[[nodiscard]] std::vector<figure> unified_figures(const std::vector<run_input>& runs);

}  // namespace gpu_basics::report::detail

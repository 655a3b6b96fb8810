// The summary at the top of the report: each run's check verdict (where its results carry one),
// the headline figures as `check` reads them from any run (so the page and `check --from` agree
// on what "pinned H2D" is), side by side with the change for two runs, and links to every section
// and figure.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/verdict/node.hpp"

namespace gpu_basics::report::detail {

namespace {

using lessons::check_result;

/// A run's figures as `check` reads them; nullopt where the run holds none (a memory run).
std::optional<check_result> figures_of(const run_input& run) {
  try {
    return verdict::check_of(run.record, lessons::check_thresholds{});
  } catch (const format_error&) {
    return std::nullopt;
  }
}

/// The verdicts a check run saved; empty for other runs.
std::vector<lessons::check_item> saved_verdicts(const run_input& run) {
  for (const auto& [name, j] : run.record.results)
    if (name == "check") try {
        return lessons::result_from_json<check_result>(j, "check").items;
      } catch (const json_path_error&) {
        return {};  // the check section says what is wrong with it
      }
  return {};
}

/// One headline figure: how to read it from a check_result, its unit, and what it is a share of.
struct headline {
  const char* name;
  const char* unit;
  double scale;        // to the unit
  const char* of;      // "the link"
  const char* anchor;  // the figure that draws it
  std::optional<double> (*value)(const check_result&);
  std::optional<double> (*ceiling)(const check_result&);
};

std::optional<double> median(const std::optional<lessons::copy_figure>& f) {
  if (!f) return std::nullopt;
  return f->bandwidth_bytes_per_s.median;
}

std::optional<double> link(const check_result& c) {
  return c.link_bytes_per_s;
}

// The check's names and conventions (D2D counts the bytes read and written).
const headline kHeadlines[] = {
    {"pinned H2D", "GB/s", 1e-9, "the link", "transfer-bandwidth",
     [](const check_result& c) { return median(c.h2d); }, link},
    {"pinned D2H", "GB/s", 1e-9, "the link", "transfer-bandwidth",
     [](const check_result& c) { return median(c.d2h); }, link},
    {"H2D + D2H at once", "GB/s", 1e-9, "twice the link", "transfer-streams",
     [](const check_result& c) { return median(c.bidirectional); },
     [](const check_result& c) {
       return c.link_bytes_per_s ? std::optional<double>(2 * *c.link_bytes_per_s) : std::nullopt;
     }},
    {"D2D (read + write)", "GB/s", 1e-9, "the HBM datasheet", "transfer-d2d",
     [](const check_result& c) {
       const auto m = median(c.d2d);
       return m ? std::optional<double>(2 * *m) : std::nullopt;
     },
     [](const check_result& c) { return c.hbm_bytes_per_s; }},
    {"bf16 GEMM", "TFLOP/s", 1e-12, "the bf16 dense peak", "profile-matmul",
     [](const check_result& c) {
       return c.gemm ? std::optional<double>(c.gemm->flops_per_s.median) : std::nullopt;
     },
     [](const check_result& c) { return c.bf16_peak_flops_per_s; }},
};

std::string verdict_badge(const std::string& status) {
  std::string lower = status;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return "<span class=\"verdict verdict-" + escape(lower) + "\">" + escape(status) + "</span>";
}

/// `value` in its unit, and its share of the ceiling where there is one.
std::string figure_cell(const headline& h, const check_result& c) {
  const auto v = h.value(c);
  if (!v) return "<td class=\"num\">&mdash;</td>";
  std::string cell = fmt::format("<td class=\"num\"><b>{:.1f} {}</b>", *v * h.scale, h.unit);
  if (const auto top = h.ceiling(c); top && *top > 0)
    cell += fmt::format("<br><span class=\"of\">{:.0f}% of {}</span>", 100 * *v / *top, h.of);
  return cell + "</td>";
}

std::string change_cell(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || !(*a > 0)) return "<td class=\"num\">&mdash;</td>";
  const double pct = 100 * (*b / *a - 1);
  // U+2212 for a fall: a hyphen reads as a dash in a column of figures.
  return fmt::format("<td class=\"num\">{}{:.1f}%</td>",
                     pct < 0 ? "\u2212" : (pct > 0 ? "+" : "\u00b1"), std::abs(pct));
}

std::string file_name(const run_input& r) {
  const std::string f = std::filesystem::path(r.record.source).filename().string();
  return f.empty() ? r.label + ".json" : f;
}

/// The verdict row and, under the table, each run's items that did not pass; without a verdict,
/// where the runs hold figures a check reads (`judgeable`), how to get one.
std::string verdicts_html(const std::vector<run_input>& runs, bool judgeable, std::string& row) {
  std::string failing;
  bool any = false;
  row = "<tr><th>check verdict</th>";
  for (const auto& r : runs) {
    const auto items = saved_verdicts(r);
    if (items.empty()) {
      row += "<td class=\"num\"><span class=\"of\">not checked</span></td>";
      continue;
    }
    any = true;
    row += "<td class=\"num\">" + verdict_badge(lessons::overall_status(items)) + "</td>";
    for (const auto& it : items) {
      if (it.status == "PASS" || it.status == "SKIP") continue;
      failing += "<li>" +
                 (runs.size() > 1 ? "<span class=\"run\">" + escape(r.label) + "</span> " : "") +
                 verdict_badge(it.status) + " " + escape(it.name) + ": " + escape(it.value) +
                 " (threshold " + escape(it.threshold) + ")" +
                 (it.hint.empty() ? "" : "; " + escape(it.hint)) + "</li>";
    }
  }
  if (runs.size() == 2) row += "<td></td>";
  row += "</tr>\n";
  if (!any) {
    row.clear();
    if (!judgeable) return "";
    std::string files;
    for (const auto& r : runs) files += (files.empty() ? "" : " ") + file_name(r);
    return "<p class=\"lead\">No check verdict in " +
           std::string(runs.size() > 1 ? "these results" : "this run") +
           ": <code>gpu-basics check --from " + escape(file_name(runs.front())) +
           "</code> judges its figures against the check thresholds.</p>\n";
  }
  return failing.empty() ? "" : "<ul class=\"verdict-items\">" + failing + "</ul>\n";
}

}  // namespace

std::string summary_html(const std::vector<run_input>& runs,
                         const std::vector<section_links>& contents) {
  std::set<std::string> anchors;
  for (const auto& s : contents) {
    anchors.insert(s.id);
    for (const auto& [id, title] : s.figures) anchors.insert(id);
  }
  std::vector<std::optional<check_result>> figures;
  for (const auto& r : runs) figures.push_back(figures_of(r));

  std::string verdict_row;
  const bool judgeable =
      std::any_of(figures.begin(), figures.end(), [](const auto& f) { return f.has_value(); });
  const std::string verdict_notes = verdicts_html(runs, judgeable, verdict_row);
  std::string rows;
  for (const auto& h : kHeadlines) {
    if (std::none_of(figures.begin(), figures.end(),
                     [&](const auto& f) { return f && h.value(*f); }))
      continue;
    // The figure that draws it, or the section of a check run.
    const std::string target = anchors.count(h.anchor) ? h.anchor : "check";
    rows += "<tr><th>" +
            (anchors.count(target) ? "<a href=\"#" + target + "\">" + escape(h.name) + "</a>"
                                   : escape(h.name)) +
            "</th>";
    for (const auto& f : figures) rows += f ? figure_cell(h, *f) : "<td class=\"num\">&mdash;</td>";
    if (runs.size() == 2)
      rows += change_cell(figures[0] ? h.value(*figures[0]) : std::nullopt,
                          figures[1] ? h.value(*figures[1]) : std::nullopt);
    rows += "</tr>\n";
  }

  std::string h = "<section id=\"summary\" class=\"summary\">\n<h2>Summary</h2>\n";
  if (!rows.empty() || !verdict_row.empty()) {
    h += "<div class=\"table-wrap\"><table class=\"headlines\">\n<caption>";
    h += runs.size() == 2 ? "Headline figures (medians), the second run against the first"
                          : "Headline figures (medians)";
    h += "</caption>\n<thead><tr><th>figure</th>";
    for (const auto& r : runs) h += "<th class=\"num\">" + escape(r.label) + "</th>";
    if (runs.size() == 2) h += "<th class=\"num\">change</th>";
    h += "</tr></thead>\n<tbody>\n" + verdict_row + rows + "</tbody></table></div>\n";
  }
  h += verdict_notes;
  if (!rows.empty())
    h += "<p class=\"lead\">Read as <code>gpu-basics check</code> reads them: the largest pinned "
         "copies and bf16 GEMM of each run; a change here is not a verdict "
         "(<code>gpu-basics compare</code> judges one against its samples).</p>\n";
  h += "<div class=\"contents\">\n";
  for (const auto& s : contents) {
    h += "<div><a class=\"section\" href=\"#" + escape(s.id) + "\">" + escape(s.name) + "</a>";
    if (!s.figures.empty()) {
      h += "<ul>";
      for (const auto& [id, title] : s.figures)
        h += "<li><a href=\"#" + escape(id) + "\">" + escape(title) + "</a></li>";
      h += "</ul>";
    }
    h += "</div>\n";
  }
  return h + "</div>\n</section>\n";
}

}  // namespace gpu_basics::report::detail

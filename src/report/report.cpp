// The page: header, the summary (verdicts, headline figures, links), one section per lesson
// (figures with notes and tables, then the lesson's other tables), the environment last; styles,
// the charting library and the charts' configurations inlined, so the file opens offline.
#include "gpu_basics/report/report.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/registry.hpp"

namespace gpu_basics::report {

std::vector<run_input> load_runs(const std::vector<std::string>& paths) {
  std::vector<lessons::run_record> records;
  for (const auto& path : paths) {
    throw_if_interrupted();  // Ctrl-C between files
    records.push_back(lessons::load_record(path));
  }
  return label_runs(std::move(records));
}

std::vector<run_input> label_runs(std::vector<lessons::run_record> records) {
  std::vector<run_input> runs;
  std::map<std::string, int> seen;
  for (auto& record : records) {
    std::string label = std::filesystem::path(record.source).filename().string();
    if (label.size() > 5 && label.ends_with(".json")) label.resize(label.size() - 5);
    if (const int n = ++seen[label]; n > 1) label += fmt::format(" ({})", n);
    runs.push_back({std::move(label), std::move(record)});
  }
  return runs;
}

std::string live_label(const lessons::run_record& r) {
  const auto& env = r.environment;
  if (env.is_object() && env.contains("host") && env["host"].is_object() &&
      env["host"].contains("hostname") && env["host"]["hostname"].is_string() &&
      !env["host"]["hostname"].get<std::string>().empty())
    return env["host"]["hostname"].get<std::string>();
  return "this run";
}

namespace {

using detail::escape;
using detail::figure;
using detail::notes_html;
using detail::script_json;
using detail::table_html;
using nlohmann::json;

/// Each run's rendered reports, by lesson.
struct rendered_run {
  const run_input* run;
  std::map<std::string, presentation::report> lessons;
};

const presentation::table* find_table(const rendered_run& r, const std::string& lesson,
                                      const std::string& id) {
  const auto it = r.lessons.find(lesson);
  if (it == r.lessons.end()) return nullptr;
  for (const auto& t : it->second.tables)
    if (t.id == id) return &t;
  return nullptr;
}

/// The notes (beside) and tables (under) of `ids`, for every run that has them.
std::pair<std::string, std::string> notes_and_tables(const std::vector<rendered_run>& runs,
                                                     const std::string& lesson,
                                                     const std::vector<std::string>& ids) {
  std::string notes, tables;
  for (const auto& r : runs) {
    const std::string label = runs.size() > 1 ? r.run->label : "";
    std::string run_notes;
    for (const auto& id : ids)
      if (const auto* t = find_table(r, lesson, id)) {
        run_notes += notes_html(*t);
        tables += table_html(*t, label);
      }
    if (run_notes.empty()) continue;
    if (!label.empty()) notes += "<h4 class=\"run\">" + escape(label) + "</h4>";
    notes += run_notes;
  }
  return {notes, tables};
}

std::string figure_html(const figure& f, const std::vector<rendered_run>& runs, json& chart_specs) {
  auto [notes, tables] = notes_and_tables(runs, f.lesson, f.tables);
  std::string h = "<figure class=\"figure\" id=\"" + escape(f.id) + "\">\n<h3>" + escape(f.title) +
                  "</h3>\n<div class=\"figure-body\">\n<div class=\"charts charts-" +
                  std::to_string(std::min<std::size_t>(f.charts.size(), 2)) + "\">\n";
  for (const auto& c : f.charts) {
    h += "<div class=\"chart-box " + c.height + "\"><canvas data-chart=\"" + escape(c.id) +
         "\" role=\"img\" aria-label=\"" + escape(c.title) + "\"></canvas></div>\n";
    chart_specs.push_back(
        {{"id", c.id}, {"title", c.title}, {"tooltip", c.tooltip}, {"config", c.config}});
  }
  h += "</div>\n";
  if (!notes.empty()) h += "<aside class=\"notes\">" + notes + "</aside>\n";
  h += "</div>\n";
  if (!tables.empty())
    h += "<details class=\"numbers\" open><summary>Numbers</summary>\n" + tables + "</details>\n";
  return h + "</figure>\n";
}

std::string info_cards(const std::vector<rendered_run>& runs) {
  std::string h = "<div class=\"cards\">\n";
  for (const auto& r : runs) {
    lessons::device_facts facts;
    try {
      facts = lessons::facts_of(r.run->record);
    } catch (const format_error&) {
      continue;  // a record without its environment's GPU
    }
    const auto& d = facts.device;
    const auto row = [](const std::string& k, const std::string& v) {
      return "<tr><th>" + escape(k) + "</th><td>" + escape(v) + "</td></tr>";
    };
    std::string link = "n/a";
    if (d.pcie_generation_current && d.pcie_width_current) {
      link = fmt::format("PCIe Gen{} x{}", *d.pcie_generation_current, *d.pcie_width_current);
      if (d.pcie_generation_max && d.pcie_width_max)
        link += fmt::format(" (max Gen{} x{})", *d.pcie_generation_max, *d.pcie_width_max);
      if (facts.link_bytes_per_s)
        link += fmt::format(", {:.1f} GB/s per direction", *facts.link_bytes_per_s / 1e9);
    }
    h += "<div class=\"card\"><h3>" + escape(d.name) + "</h3>";
    if (runs.size() > 1) h += "<p class=\"run\">" + escape(r.run->label) + "</p>";
    h += "<table class=\"kv\">";
    h += row("GPU", fmt::format("{} (index {}, {})", d.name, d.index, d.pci_bus_id));
    h += row("compute capability", fmt::format("{}.{}, {} SMs", d.compute_capability_major,
                                               d.compute_capability_minor, d.sm_count));
    h += row("memory", fmt::format("{} ({}-bit bus, ECC {})", format_bytes(d.total_memory_bytes),
                                   d.memory_bus_width_bits, d.ecc_enabled ? "on" : "off"));
    h +=
        row("HBM, datasheet", facts.datasheet ? fmt::format("{:.2f} TB/s ({})",
                                                            facts.datasheet->hbm_bytes_per_s / 1e12,
                                                            facts.datasheet->source)
                                              : std::string("unknown GPU"));
    h += row("host link", link);
    h += row("copy engines", std::to_string(d.copy_engines));
    h += row("driver", d.driver_version.value_or("n/a") + ", CUDA runtime " +
                           cuda_version_string(d.runtime_version));
    h += "</table></div>\n";
  }
  return h + "</div>\n";
}

std::string environment_html(const std::vector<rendered_run>& runs) {
  std::string h;
  for (const auto& r : runs) {
    if (runs.size() > 1) h += "<h3 class=\"run\">" + escape(r.run->label) + "</h3>\n";
    h += "<pre class=\"environment\">" + escape(r.run->record.environment.dump(2)) + "</pre>\n";
  }
  return h;
}

std::string header_html(const std::vector<run_input>& runs) {
  std::string h = "<header>\n<h1>gpu-basics report</h1>\n<ul class=\"runs\">";
  for (const auto& r : runs) {
    std::string when = "unknown time";
    const auto& env = r.record.environment;
    if (env.is_object() && env.contains("timestamp_utc") && env["timestamp_utc"].is_string())
      when = env["timestamp_utc"].get<std::string>();
    h += "<li><b>" + escape(r.label) + "</b>: <code>gpu-basics " + escape(r.record.command) +
         "</code>, " + escape(when) + "</li>";
    for (const auto& [lesson, why] : r.record.errors)
      h += "<li class=\"error\">" + escape(r.label) + ": " + escape(lesson) +
           " failed in this run: " + escape(why) + "</li>";
  }
  return h + "</ul>\n</header>\n";
}

}  // namespace

std::string render_html(const std::vector<run_input>& runs) {
  if (runs.empty()) throw logic_error("render_html: no runs");
  std::vector<rendered_run> rendered;
  for (const auto& r : runs) {
    rendered_run rr{&r, {}};
    throw_if_interrupted();
    for (auto& rep : lessons::render(r.record)) {
      const std::string name = rep.lesson;
      rr.lessons.emplace(name, std::move(rep));
    }
    rendered.push_back(std::move(rr));
  }
  std::map<std::string, std::vector<figure>> figures;
  figures["memory"] = detail::memory_figures(runs);
  figures["transfer"] = detail::transfer_figures(runs);
  figures["profile"] = detail::profile_figures(runs);
  figures["unified"] = detail::unified_figures(runs);

  json specs = json::array();
  std::string body, nav = "<a href=\"#summary\">summary</a>";
  std::vector<detail::section_links> contents;
  for (const auto& l : lessons::registry()) {
    const std::string name(l.name);
    const bool present = std::any_of(rendered.begin(), rendered.end(),
                                     [&](const auto& r) { return r.lessons.count(name) > 0; });
    if (!present) continue;
    nav += "<a href=\"#" + name + "\">" + name + "</a>";
    contents.push_back({name, name, {}});
    body += "<section id=\"" + name + "\">\n<h2>" + name + "</h2>\n<p class=\"lead\">" +
            escape(l.description) + "</p>\n";
    if (name == "info") body += info_cards(rendered);
    std::set<std::string> shown;
    for (const auto& f : figures[name]) {
      throw_if_interrupted();  // Ctrl-C between figures
      body += figure_html(f, rendered, specs);
      contents.back().figures.emplace_back(f.id, f.title);
      shown.insert(f.tables.begin(), f.tables.end());
    }
    std::vector<std::string> rest;  // every table without a chart, in the lesson's order
    for (const auto& r : rendered)
      if (const auto it = r.lessons.find(name); it != r.lessons.end())
        for (const auto& t : it->second.tables)
          if (!shown.count(t.id) && std::find(rest.begin(), rest.end(), t.id) == rest.end())
            rest.push_back(t.id);
    if (!rest.empty()) {
      const auto [notes, tables] = notes_and_tables(rendered, name, rest);
      body += "<div class=\"more\"><h3>" + std::string(name == "info" ? "Details" : "More tables") +
              "</h3>\n" + tables +
              (notes.empty() ? "" : "<div class=\"notes\">" + notes + "</div>") + "</div>\n";
    }
    body += "</section>\n";
  }
  nav += "<a href=\"#environment\">environment</a>";
  contents.push_back({"environment", "environment", {}});
  body += "<section id=\"environment\">\n<h2>environment</h2>\n" + environment_html(rendered) +
          "</section>\n";

  std::string title = "gpu-basics report";
  for (const auto& r : runs) title += " · " + r.label;
  return detail::page_html(title, header_html(runs), nav,
                           detail::summary_html(runs, contents) + body, specs);
}

}  // namespace gpu_basics::report

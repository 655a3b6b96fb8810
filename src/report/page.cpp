// The page around a report's body: styles, the charting library and the charts' configurations
// inlined, so the file opens offline; and the HTML of tables and notes. Shared by the runs'
// report and the pages of advise and replay.
#include <cstdint>
#include <variant>

#include "figures.hpp"

namespace gpu_basics::report {

namespace assets {
// Generated at build time from src/report/assets/ and third_party/chartjs/ (embed.cmake).
extern const char* const report_css;
extern const char* const report_js;
extern const char* const chart_js;
extern const char* const annotation_js;
extern const char* const matrix_js;
}  // namespace assets

namespace detail {

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

/// A note's text as HTML: escaped, `code` spans kept, the leading "- " dropped.
std::string note_html(std::string_view note) {
  if (note.starts_with("- ")) note.remove_prefix(2);
  const std::string e = escape(note);
  std::string out;
  bool in_code = false;
  for (const char c : e) {
    if (c == '`') {
      out += in_code ? "</code>" : "<code>";
      in_code = !in_code;
    } else {
      out += c;
    }
  }
  if (in_code) out += "</code>";
  return out;
}

namespace {
/// Escaped text with a line-break opportunity after each comma and semicolon, where a long value
/// with no space (a list of settings) wraps before the browser has to break inside a word.
std::string break_after_separators(const std::string& escaped) {
  std::string out;
  out.reserve(escaped.size() + escaped.size() / 8);
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    out += escaped[i];
    // ';' ends an entity (&amp;) as well: no break inside one.
    const bool entity_end = escaped[i] == ';' && escaped.rfind('&', i) != std::string::npos &&
                            i - escaped.rfind('&', i) <= 6;
    if ((escaped[i] == ',' || (escaped[i] == ';' && !entity_end)) && i + 1 < escaped.size())
      out += "<wbr>";
  }
  return out;
}
}  // namespace

std::string table_html(const presentation::table& t, const std::string& run_label) {
  std::string h = "<div class=\"table-wrap\"><table>\n<caption>";
  if (!run_label.empty()) h += "<span class=\"run\">" + escape(run_label) + "</span> ";
  h += escape(t.title) + "</caption>\n<thead><tr>";
  for (const auto& c : t.columns) h += "<th>" + escape(c.header) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    h += "<tr>";
    for (std::size_t i = 0; i < row.size() && i < t.columns.size(); ++i) {
      const bool number =
          std::holds_alternative<std::int64_t>(row[i]) || std::holds_alternative<double>(row[i]);
      // Long text (a sentence, not a label) wraps instead of widening the table.
      const bool prose =
          std::holds_alternative<std::string>(row[i]) && std::get<std::string>(row[i]).size() > 60;
      h += number ? "<td class=\"num\">" : (prose ? "<td class=\"prose\">" : "<td>");
      const std::string text = escape(presentation::render_cell(row[i], t.columns[i]));
      h += prose ? break_after_separators(text) : text;
      h += "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</tbody></table></div>\n";
}

std::string notes_html(const presentation::table& t) {
  if (t.notes.empty()) return "";
  std::string h = "<ul>";
  for (const auto& n : t.notes) h += "<li>" + note_html(n) + "</li>";
  return h + "</ul>";
}

/// The JSON of the charts, safe inside a <script> element.
std::string chart_figure_html(const std::string& id, const std::string& title, const chart& c,
                              const presentation::table& t, json& specs) {
  std::string out = "<figure class=\"figure\" id=\"" + escape(id) + "\">\n<h3>" + escape(title) +
                    "</h3>\n<div class=\"figure-body\">\n<div class=\"charts charts-1\">\n";
  out += "<div class=\"chart-box " + c.height + "\"><canvas data-chart=\"" + escape(c.id) +
         "\" role=\"img\" aria-label=\"" + escape(c.title) + "\"></canvas></div>\n</div>\n";
  out += "<aside class=\"notes\">" + notes_html(t) + "</aside>\n</div>\n";
  out += "<details class=\"numbers\" open><summary>Numbers</summary>\n" + table_html(t, "") +
         "</details>\n</figure>\n";
  specs.push_back({{"id", c.id}, {"title", c.title}, {"tooltip", c.tooltip}, {"config", c.config}});
  return out;
}

std::string script_json(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') {  // no "</script>" or "<!--" can end or bend the element
      out += "\\u003c";
      continue;
    }
    out += s[i];
  }
  return out;
}

std::string page_html(const std::string& title, const std::string& header, const std::string& nav,
                      const std::string& body, const json& specs) {
  std::string html;
  html.reserve(400000);
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<meta name=\"color-scheme\" content=\"light dark\">\n";
  html += "<meta name=\"generator\" content=\"gpu-basics\">\n";
  html += "<title>" + escape(title) + "</title>\n<style>\n" + assets::report_css + "</style>\n";
  html += "</head>\n<body>\n" + header + "<nav>" + nav + "</nav>\n<main>\n" + body + "</main>\n";
  html +=
      "<script type=\"application/json\" id=\"gb-charts\">" + script_json(specs) + "</script>\n";
  html += std::string("<script>") + assets::chart_js + "</script>\n";
  html += std::string("<script>") + assets::annotation_js + "</script>\n";
  html += std::string("<script>") + assets::matrix_js + "</script>\n";
  html += std::string("<script>") + assets::report_js + "</script>\n";
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace detail
}  // namespace gpu_basics::report

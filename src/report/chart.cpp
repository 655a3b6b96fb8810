// Chart building blocks: palette, axes, datasets, reference lines. Chart.js configuration only.
#include <array>
#include <cstdio>

#include "figures.hpp"

namespace gpu_basics::report::detail {

std::string color(std::size_t series) {
  // Okabe & Ito, "Color Universal Design" (2008), without yellow and black (too faint on white,
  // invisible on dark).
  static constexpr std::array<const char*, 6> palette = {"#0072b2", "#d55e00", "#009e73",
                                                         "#cc79a7", "#e69f00", "#56b4e9"};
  return palette[series % palette.size()];
}

std::string with_alpha(const std::string& hex, double alpha) {
  unsigned r = 0, g = 0, b = 0;
  if (hex.size() != 7 || std::sscanf(hex.c_str(), "#%02x%02x%02x", &r, &g, &b) != 3) return hex;
  char out[48];
  std::snprintf(out, sizeof out, "rgba(%u,%u,%u,%.2f)", r, g, b, alpha);
  return out;
}

std::string series_name(const std::string& label, const std::string& name) {
  return label.empty() ? name : label + ": " + name;
}

std::string unit_symbol(const std::string& unit) {
  if (unit == "seconds") return "s";
  if (unit == "x") return "\u00d7";
  return unit;
}

std::string titled_with_unit(const std::string& title, const std::string& unit) {
  // A title that names its unit already ("bandwidth (GB/s)") is kept; one with a parenthesis of
  // its own ("time (log scale)") takes the unit first inside it; any other, the unit after it.
  const std::string symbol = unit_symbol(unit);
  if (symbol.empty()) return title;
  for (auto at = title.find(symbol); at != std::string::npos; at = title.find(symbol, at + 1)) {
    const std::size_t end = at + symbol.size();
    const bool starts = at == 0 || title[at - 1] == ' ' || title[at - 1] == '(';
    const bool ends =
        end == title.size() || title[end] == ' ' || title[end] == ')' || title[end] == ',';
    if (starts && ends) return title;  // a word of the title already
  }
  const auto open = title.rfind('(');
  if (open != std::string::npos && title.ends_with(")"))
    return title.substr(0, open + 1) + symbol + ", " + title.substr(open + 1);
  return title + " (" + symbol + ")";
}

json axis(const std::string& title, const std::string& unit, bool log) {
  // No unit: the axis names categories (bars' labels, heatmap rows, Gantt lanes).
  const char* type = unit.empty() ? "category" : (log ? "logarithmic" : "linear");
  json a = {{"type", type},
            {"title", {{"display", true}, {"text", titled_with_unit(title, unit)}}},
            {"gbUnit", unit}};
  return a;
}

json base_config(const std::string& type, const std::string& title, json x, json y) {
  json c;
  c["type"] = type;
  c["data"] = {{"datasets", json::array()}};
  c["options"] = {{"responsive", true},
                  {"maintainAspectRatio", false},
                  {"animation", false},
                  {"interaction", {{"mode", "nearest"}, {"intersect", false}}},
                  {"plugins",
                   {{"title", {{"display", true}, {"text", title}, {"font", {{"size", 14}}}}},
                    {"legend", {{"display", true}, {"position", "bottom"}}},
                    {"annotation", {{"annotations", json::object()}}}}},
                  {"scales", {{"x", std::move(x)}, {"y", std::move(y)}}}};
  return c;
}

chart horizontal_bars(std::string id, std::string title, json values, json categories) {
  chart c{std::move(id), std::move(title), {}};
  c.config = base_config("bar", c.title, std::move(values), std::move(categories));
  c.config["options"]["indexAxis"] = "y";
  c.tooltip = "x";
  return c;
}

namespace {
json dash_of(std::size_t run) {
  static const std::array<json, 3> dashes = {json::array(), json::array({6, 4}),
                                             json::array({2, 3})};
  return dashes[run % dashes.size()];
}
}  // namespace

json line_dataset(const std::string& label, const std::string& colour, std::size_t run,
                  const std::vector<std::pair<double, double>>& xy) {
  json points = json::array();
  for (const auto& [x, y] : xy) points.push_back({{"x", x}, {"y", y}});
  return {{"type", "line"},
          {"label", label},
          {"data", std::move(points)},
          {"borderColor", colour},
          {"backgroundColor", colour},
          {"borderDash", dash_of(run)},
          {"borderWidth", 2},
          {"pointRadius", 2.5},
          {"pointStyle", run == 0 ? "circle" : (run == 1 ? "rect" : "triangle")},
          {"tension", 0}};
}

json bar_dataset(const std::string& label, const std::string& colour, std::size_t run,
                 const std::vector<std::optional<double>>& values) {
  json data = json::array();
  for (const auto& v : values) data.push_back(v ? json(*v) : json(nullptr));
  return {{"label", label},
          {"data", std::move(data)},
          {"backgroundColor", run == 0 ? colour : with_alpha(colour, 0.35)},
          {"borderColor", colour},
          {"borderWidth", run == 0 ? 0 : 2},
          {"borderDash", dash_of(run)}};
}

json reference_line(double value, const std::string& label, const std::string& colour,
                    bool vertical) {
  json a = {{"type", "line"},
            {"borderColor", colour},
            {"borderWidth", 1.5},
            {"borderDash", {5, 4}},
            {"label",
             {{"display", true},
              {"content", label},
              {"position", "end"},
              {"color", colour},
              {"font", {{"size", 11}}},
              {"yAdjust", -9}}}};
  a[vertical ? "xMin" : "yMin"] = value;
  a[vertical ? "xMax" : "yMax"] = value;
  return a;
}

void annotate(json& config, const std::string& key, json annotation) {
  // A horizontal line labelled above itself needs room above it inside the chart: the label is
  // kept inside the chart area, so a line near the top would draw its label over itself.
  const bool horizontal = annotation.contains("yMin") && annotation.contains("yMax");
  const bool label_above = annotation.contains("label") && annotation["label"].is_object() &&
                           annotation["label"].value("yAdjust", 0.0) < 0;
  const std::string axis = annotation.value("yScaleID", std::string("y"));
  auto& scales = config["options"]["scales"];
  if (horizontal && label_above && annotation["yMax"].is_number() && scales.contains(axis)) {
    json& y = scales[axis];
    const bool log = y.value("type", "") == "logarithmic";
    const double room = annotation["yMax"].get<double>() * (log ? 1.6 : 1.1);
    if (room > 0 && (!y.contains("suggestedMax") || y["suggestedMax"].get<double>() < room))
      y["suggestedMax"] = room;
  }
  config["options"]["plugins"]["annotation"]["annotations"][key] = std::move(annotation);
}

}  // namespace gpu_basics::report::detail

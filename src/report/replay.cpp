// The replay page (report/replay.hpp).
#include "gpu_basics/report/replay.hpp"

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics::report {

namespace {

using detail::chart;
using nlohmann::json;

/// Two bars per policy, its peak reserved and peak allocated (none where it ran out of memory),
/// and the peak PyTorch reserved as a line across them.
chart peaks_chart(const replay_report& r) {
  chart c =
      detail::horizontal_bars("replay-peaks", "Peak reserved and allocated per policy",
                              detail::axis("peak reserved", "bytes"), detail::axis("policy", ""));
  c.height = r.policies.size() > 8 ? "tall" : "normal";
  json labels = json::array();
  std::vector<std::optional<double>> reserved, allocated;
  for (const auto& p : r.policies) {
    labels.push_back(policy_label(p.conf));
    const auto of = [&](std::size_t replay_result::*field) {
      return p.result ? std::optional(static_cast<double>((*p.result).*field)) : std::nullopt;
    };
    reserved.push_back(of(&replay_result::peak_reserved));
    allocated.push_back(of(&replay_result::peak_allocated));
  }
  c.config["data"]["labels"] = std::move(labels);
  c.config["data"]["datasets"].push_back(
      detail::bar_dataset("peak reserved (replayed)", detail::color(0), 0, reserved));
  c.config["data"]["datasets"].push_back(
      detail::bar_dataset("peak allocated (replayed)", detail::color(1), 0, allocated));
  detail::annotate(
      c.config, "recorded",
      detail::reference_line(static_cast<double>(r.recorded.peak_reserved),
                             "PyTorch (recorded): " + format_bytes(r.recorded.peak_reserved),
                             detail::color(3), true));
  return c;
}

}  // namespace

std::string render_replay_html(const replay_report& r) {
  using detail::escape;
  const presentation::table t = replay_table(r);
  const chart c = peaks_chart(r);
  json specs = json::array();
  const std::string body = "<section id=\"replay\">\n<h2>replay</h2>\n" +
                           detail::chart_figure_html("replay-figure", c.title, c, t, specs) +
                           "</section>\n";
  const std::string header = "<header>\n<h1>gpu-basics replay</h1>\n<ul class=\"runs\"><li><b>" +
                             escape(r.file) + "</b>: device " + std::to_string(r.device) + ", " +
                             std::to_string(r.trace_events) + " trace events, " +
                             std::to_string(r.policies.size()) + " policies</li></ul>\n</header>\n";
  return detail::page_html("gpu-basics replay · " + r.file, header,
                           "<a href=\"#replay\">replay</a>", body, specs);
}

}  // namespace gpu_basics::report

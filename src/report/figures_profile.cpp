// The profile lesson's figures: TFLOP/s per precision against the peak, the NVML series with the
// matmul phases marked, key averages, and one kernel timed three ways.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/lessons/profile.hpp"

namespace gpu_basics::report::detail {

namespace {

using lessons::profile_result;
using runs_t = std::vector<run_result<profile_result>>;

figure matmul_figure(const runs_t& runs) {
  chart c{"profile-matmul", "Matmul throughput per precision against the datasheet peak", {}};
  c.config = base_config("bar", c.title, axis("precision and shape (m x n x k)", ""),
                         axis("TFLOP/s (dense)", "TFLOP/s"));
  std::vector<std::string> labels;
  for (const auto& rr : runs)
    for (const auto& m : rr.result.matmul.runs) {
      const auto l = fmt::format("{} {}x{}x{}", m.precision, m.m, m.n, m.k);
      if (std::find(labels.begin(), labels.end(), l) == labels.end()) labels.push_back(l);
    }
  std::map<std::string, std::optional<double>> peak;
  for (const auto& rr : runs) {
    std::vector<std::optional<double>> measured(labels.size());
    for (const auto& m : rr.result.matmul.runs) {
      const auto l = fmt::format("{} {}x{}x{}", m.precision, m.m, m.n, m.k);
      const auto i =
          static_cast<std::size_t>(std::find(labels.begin(), labels.end(), l) - labels.begin());
      measured[i] = m.flops_per_s.median / 1e12;
      if (m.peak_flops_per_s && !peak[l]) peak[l] = *m.peak_flops_per_s / 1e12;
    }
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "measured (median)"), color(0), rr.index, measured));
  }
  std::vector<std::optional<double>> peaks;
  peaks.reserve(labels.size());
  for (const auto& l : labels) peaks.push_back(peak[l]);
  if (std::any_of(peaks.begin(), peaks.end(), [](const auto& p) { return p.has_value(); })) {
    auto ds = bar_dataset("datasheet peak", "#7f7f7f", 0, peaks);
    ds["backgroundColor"] = "rgba(127,127,127,0.25)";
    ds["borderColor"] = "#7f7f7f";
    ds["borderWidth"] = 1;
    c.config["data"]["datasets"].push_back(std::move(ds));
  }
  c.config["data"]["labels"] = labels;
  return {"profile-matmul", "profile", "Matmul against the peak", {std::move(c)}, {"matmul"}};
}

/// One NVML metric over time, every run, with each run's matmul phases as boxes.
chart nvml_chart(const runs_t& runs, const std::string& metric, const std::string& title,
                 const std::string& unit) {
  chart c{"profile-nvml-" + metric, title, {}};
  c.config =
      base_config("line", title, axis("time since sampling began", "seconds"), axis(title, unit));
  c.height = "short";
  for (const auto& rr : runs) {
    if (!rr.result.nvml) continue;
    for (const auto& s : rr.result.nvml->series) {
      if (s.metric != metric) continue;
      std::vector<std::pair<double, double>> xy;
      for (std::size_t i = 0; i < s.time_s.size() && i < s.values.size(); ++i)
        xy.emplace_back(s.time_s[i], s.values[i]);
      auto ds = line_dataset(series_name(rr.label, title), color(rr.index), rr.index, xy);
      // Steps, not slopes that invent values between samples: each value is drawn over the
      // interval up to its sample (NVML's power and utilization are averages over its last
      // sample period); few samples are marked as points as well.
      ds["stepped"] = "after";
      ds["pointRadius"] = xy.size() < 40 ? 3 : 0;
      c.config["data"]["datasets"].push_back(std::move(ds));
    }
    if (rr.index != runs.front().index) continue;  // phases of the first run only: boxes overlap
    std::size_t k = 0;
    for (const auto& m : rr.result.matmul.runs) {
      if (!m.start_s || !m.end_s) continue;
      annotate(c.config, fmt::format("phase{}", k),
               {{"type", "box"},
                {"xMin", *m.start_s},
                {"xMax", *m.end_s},
                {"backgroundColor", with_alpha(color(k + 2), 0.12)},
                {"borderWidth", 0}});
      // The phase's name as a label of its own at the top of its box: the plugin draws a box's
      // own label without a ground, and the page gives every label one.
      annotate(c.config, fmt::format("phase{}-name", k),
               {{"type", "label"},
                {"xMin", *m.start_s},
                {"xMax", *m.end_s},
                {"content", m.precision},
                {"position", {{"x", "center"}, {"y", "start"}}},
                // Short phases stand close: their labels take three rows in turn, so that
                // neighbours' labels are not drawn over each other.
                {"yAdjust", 4 + 22 * static_cast<int>(k % 3)},
                {"font", {{"size", 10}}},
                {"color", color(k + 2)}});
      ++k;
    }
  }
  return c;
}

figure nvml_figure(const runs_t& runs) {
  figure f{"profile-nvml", "profile", "NVML during the matmuls (phases marked)", {}, {"nvml"}};
  static const std::tuple<const char*, const char*, const char*> metrics[] = {
      {"gpu_util_percent", "GPU utilization", "%"},
      {"power_w", "Power", "W"},
      {"sm_clock_mhz", "SM clock", "MHz"},
      {"temperature_c", "Temperature", "°C"}};
  for (const auto& [metric, title, unit] : metrics) {
    bool present = false;
    for (const auto& rr : runs)
      if (rr.result.nvml)
        for (const auto& s : rr.result.nvml->series) present = present || s.metric == metric;
    if (present) f.charts.push_back(nvml_chart(runs, metric, title, unit));
  }
  return f;
}

figure key_averages_figure(const runs_t& runs) {
  chart c = horizontal_bars("profile-key-averages", "Key averages: mean time per call",
                            axis("time per call (log scale)", "seconds", true), axis("region", ""));
  std::vector<std::string> labels;
  for (const auto& rr : runs)
    for (const auto& r : rr.result.key_averages.regions)
      if (std::find(labels.begin(), labels.end(), r.name) == labels.end()) labels.push_back(r.name);
  for (const auto& rr : runs) {
    std::vector<std::optional<double>> gpu(labels.size()), host(labels.size());
    for (const auto& r : rr.result.key_averages.regions) {
      if (r.calls == 0) continue;
      const auto i = static_cast<std::size_t>(std::find(labels.begin(), labels.end(), r.name) -
                                              labels.begin());
      gpu[i] = r.gpu_total_s / static_cast<double>(r.calls);
      host[i] = r.host_total_s / static_cast<double>(r.calls);
    }
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "GPU (CUDA events)"), color(0), rr.index, gpu));
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "host (issuing)"), color(1), rr.index, host));
  }
  c.config["data"]["labels"] = labels;
  chart t = horizontal_bars("profile-timing-methods", "One kernel timed three ways (median)",
                            axis("measured time (log scale)", "seconds", true), axis("method", ""));
  t.config["data"]["labels"] = {"host clock, launch only", "host clock + synchronize",
                                "CUDA events"};
  for (const auto& rr : runs) {
    const auto& m = rr.result.timing;
    t.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "median"), color(rr.index), rr.index,
                    {m.host_no_sync_s.median, m.host_sync_s.median, m.events_s.median}));
  }
  return {"profile-key-averages",
          "profile",
          "Timing: key averages and three clocks",
          {std::move(c), std::move(t)},
          {"key_averages", "timing_methods"}};
}

}  // namespace

std::vector<figure> profile_figures(const std::vector<run_input>& inputs) {
  const auto runs = results_of<profile_result>(inputs, "profile");
  std::vector<figure> out;
  if (runs.empty()) return out;
  out.push_back(matmul_figure(runs));
  if (std::any_of(runs.begin(), runs.end(),
                  [](const auto& rr) { return rr.result.nvml && !rr.result.nvml->series.empty(); }))
    out.push_back(nvml_figure(runs));
  out.push_back(key_averages_figure(runs));
  return out;
}

}  // namespace gpu_basics::report::detail

// The transfer lesson's figures: bandwidth against size, D2D against HBM, streams, sync vs async,
// double-buffering (steps and the measured batches), between GPUs (heatmaps, NCCL).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/transfer.hpp"

namespace gpu_basics::report::detail {

namespace {

using lessons::copy_figure;
using lessons::transfer_result;
using runs_t = std::vector<run_result<transfer_result>>;

constexpr double kGB = 1e9;

double gbps(const copy_figure& f) {
  return f.bandwidth_bytes_per_s.median / kGB;
}

/// A reference line per distinct value (several runs of one GPU share one line), its label at
/// `position` along it, above it or `below` it.
void reference_lines(json& config, const std::string& key, const std::vector<double>& values,
                     const std::string& label, const std::string& colour,
                     const std::string& position = "end", bool below = false) {
  // Values within 2% of each other (several runs of one kind of node) share one line, labelled
  // with their range: lines that close would draw their labels over each other.
  std::vector<std::pair<double, double>> groups;  // min, max
  for (double v : values) {
    if (!(v > 0)) continue;
    const auto near = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return v >= g.first / 1.02 && v <= g.second * 1.02;
    });
    if (near == groups.end())
      groups.emplace_back(v, v);
    else
      *near = {std::min(near->first, v), std::max(near->second, v)};
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto [lo, hi] = groups[i];
    const std::string figure = fmt::format("{:.1f}", lo) == fmt::format("{:.1f}", hi)
                                   ? fmt::format("{:.1f} GB/s", lo)
                                   : fmt::format("{:.1f}-{:.1f} GB/s", lo, hi);
    auto line = reference_line(hi, label + " " + figure, colour);
    line["label"]["position"] = position;
    if (below) line["label"]["yAdjust"] = 9;
    annotate(config, key + std::to_string(i), std::move(line));
  }
}

/// The best pinned median of a run (shapes and sweep): the measured ceiling.
double pinned_ceiling(const transfer_result& r) {
  double best = 0;
  for (const auto& s : r.shapes)
    for (const auto& c : s.copies)
      if (c.memory == "pinned") best = std::max(best, gbps(c));
  if (r.sweep)
    for (const auto& p : *r.sweep) {
      if (p.h2d_pinned) best = std::max(best, gbps(*p.h2d_pinned));
      if (p.d2h_pinned) best = std::max(best, gbps(*p.d2h_pinned));
    }
  return best;
}

/// Bandwidth against size: the sweep's six curves where the run has a sweep, else the tensor
/// shapes' copies (three sizes) per direction and memory.
figure sweep_figure(const runs_t& runs) {
  chart c{"transfer-bandwidth-size", "Host <-> device bandwidth against copy size", {}};
  c.config = base_config("line", c.title, axis("copy size (log scale)", "bytes", true),
                         axis("bandwidth, median (GB/s, log scale)", "GB/s", true));
  std::vector<double> links, ceilings;
  for (const auto& rr : runs) {
    const auto& r = rr.result;
    using getter = const copy_figure* (*)(const lessons::sweep_point&);
    std::map<std::string, std::vector<std::pair<double, double>>> curves;
    if (r.sweep && !r.sweep->empty()) {
      static const std::pair<const char*, getter> kinds[] = {
          {"H2D pinned",
           [](const lessons::sweep_point& p) { return p.h2d_pinned ? &*p.h2d_pinned : nullptr; }},
          {"D2H pinned",
           [](const lessons::sweep_point& p) { return p.d2h_pinned ? &*p.d2h_pinned : nullptr; }},
          {"H2D pageable", [](const lessons::sweep_point& p) { return &p.h2d_pageable; }},
          {"D2H pageable",
           [](const lessons::sweep_point& p) {
             return p.d2h_pageable ? &*p.d2h_pageable : nullptr;
           }},
          {"H2D staged",
           [](const lessons::sweep_point& p) { return p.h2d_staged ? &*p.h2d_staged : nullptr; }},
          {"D2H staged",
           [](const lessons::sweep_point& p) { return p.d2h_staged ? &*p.d2h_staged : nullptr; }}};
      for (const auto& [name, get] : kinds)
        for (const auto& p : *r.sweep)
          if (const auto* f = get(p))
            curves[name].emplace_back(static_cast<double>(p.bytes), gbps(*f));
    } else {
      for (const auto& s : r.shapes)
        for (const auto& f : s.copies)
          curves[f.direction + " " + f.memory].emplace_back(static_cast<double>(f.bytes), gbps(f));
    }
    static const char* order[] = {"H2D pinned",   "D2H pinned", "H2D pageable",
                                  "D2H pageable", "H2D staged", "D2H staged"};
    // H2D and D2H of one memory are often equal (pinned both reach the ceiling): D2H is dashed
    // with triangles, a run's H2D solid (a second run's dotted) with circles, and each series is
    // drawn over the ones before it, so that a dashed line shows over the solid one it matches.
    static const json dashes[2][2] = {{json::array(), json::array({7, 4})},
                                      {json::array({2, 3}), json::array({9, 3, 2, 3})}};
    for (std::size_t k = 0; k < std::size(order); ++k) {
      const auto it = curves.find(order[k]);
      if (it == curves.end()) continue;
      const bool d2h = it->first.starts_with("D2H");
      json line = line_dataset(series_name(rr.label, it->first), color(k), rr.index, it->second);
      line["borderDash"] = dashes[rr.index % 2][d2h ? 1 : 0];
      line["pointStyle"] = d2h ? "triangle" : "circle";
      line["pointRadius"] = d2h ? 4 : 2.5;
      line["order"] = -static_cast<int>(c.config["data"]["datasets"].size());
      c.config["data"]["datasets"].push_back(std::move(line));
    }
    if (r.link_bytes_per_s) links.push_back(*r.link_bytes_per_s / kGB);
    ceilings.push_back(pinned_ceiling(r));
  }
  reference_lines(c.config, "link", links, "link, theoretical:", "#7f7f7f", "center");
  // At the left, under its line: the small copies there are far below the ceiling.
  reference_lines(c.config, "ceiling", ceilings, "measured pinned ceiling:", "#0072b2", "start",
                  true);
  for (auto& [key, a] : c.config["options"]["plugins"]["annotation"]["annotations"].items())
    if (key.starts_with("ceiling")) a["label"]["xAdjust"] = 8;  // clear of the axis
  // The legend shows each series' marker: circles H2D, triangles D2H.
  c.config["options"]["plugins"]["legend"]["labels"] = {{"usePointStyle", true}};
  c.height = "tall";
  return {"transfer-bandwidth",
          "transfer",
          "Bandwidth against copy size",
          {std::move(c)},
          {"sweep", "bandwidth", "pageable_upload"}};
}

figure d2d_figure(const runs_t& runs) {
  chart c{"transfer-d2d", "Device -> device copies against the HBM datasheet", {}};
  std::vector<std::uint64_t> sizes;
  for (const auto& rr : runs)
    for (const auto& f : rr.result.d2d)
      if (std::find(sizes.begin(), sizes.end(), f.bytes) == sizes.end()) sizes.push_back(f.bytes);
  std::sort(sizes.begin(), sizes.end());
  c.config = base_config("bar", c.title, axis("copy size", ""),
                         axis("HBM traffic, read + write (GB/s)", "GB/s"));
  for (const auto b : sizes) c.config["data"]["labels"].push_back(format_bytes(b));
  std::vector<double> sheets;
  for (const auto& rr : runs) {
    std::vector<std::optional<double>> v(sizes.size());
    for (const auto& f : rr.result.d2d) {
      const auto i =
          static_cast<std::size_t>(std::find(sizes.begin(), sizes.end(), f.bytes) - sizes.begin());
      v[i] = 2 * gbps(f);  // a D2D copy reads and writes HBM
    }
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "read + write"), color(0), rr.index, v));
    if (rr.result.hbm_bytes_per_s) sheets.push_back(*rr.result.hbm_bytes_per_s / kGB);
  }
  reference_lines(c.config, "hbm", sheets, "HBM datasheet:", "#7f7f7f");
  return {"transfer-d2d", "transfer", "Device to device", {std::move(c)}, {"d2d"}};
}

figure streams_figure(const runs_t& runs) {
  chart c{"transfer-streams", "One copy split over streams", {}};
  c.config =
      base_config("bar", c.title, axis("direction", ""), axis("bandwidth (GB/s, median)", "GB/s"));
  std::vector<std::string> labels;
  std::vector<double> links;
  for (const auto& rr : runs) {
    if (!rr.result.streams) continue;
    const auto& s = *rr.result.streams;
    std::vector<std::string> l;
    std::vector<std::optional<double>> one, many;
    for (const auto& d : s.directions) {
      l.push_back(d.one.direction);
      one.emplace_back(gbps(d.one));
      many.emplace_back(gbps(d.many));
    }
    if (s.bidirectional) {
      l.emplace_back("H2D + D2H at once");
      one.emplace_back(std::nullopt);
      many.emplace_back(gbps(*s.bidirectional));
    }
    if (labels.empty()) labels = l;
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "1 stream"), color(0), rr.index, one));
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, fmt::format("{} streams", s.requested_streams)), color(1),
                    rr.index, many));
    if (rr.result.link_bytes_per_s) links.push_back(*rr.result.link_bytes_per_s / kGB);
  }
  c.config["data"]["labels"] = labels;
  // At the left, above the one-direction bars: the bidirectional bar at the right crosses it.
  reference_lines(c.config, "link", links, "link, theoretical:", "#7f7f7f", "start");
  return {"transfer-streams", "transfer", "Streams and copy engines", {std::move(c)}, {"streams"}};
}

figure sync_async_figure(const runs_t& runs) {
  chart c =
      horizontal_bars("transfer-sync-async", "Who waits: the CPU blocked per copy call",
                      axis("time (log scale)", "seconds", true), axis("host memory and API", ""));
  std::vector<std::string> labels;
  for (const auto& rr : runs) {
    std::vector<std::string> l;
    std::vector<std::optional<double>> blocked, copy;
    for (const auto& f : rr.result.sync_async) {
      l.push_back(f.memory + ", cudaMemcpy");
      blocked.emplace_back(f.sync_call_s.median);
      copy.emplace_back(f.async_copy_s.median);
      l.push_back(f.memory + ", cudaMemcpyAsync");
      blocked.emplace_back(f.async_call_s.median);
      copy.emplace_back(f.async_copy_s.median);
    }
    if (labels.empty()) labels = l;
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "CPU blocked in the call"), color(1), rr.index, blocked));
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "the copy on the GPU"), color(0), rr.index, copy));
  }
  c.config["data"]["labels"] = labels;
  return {"transfer-sync-async",
          "transfer",
          "Synchronous vs asynchronous copies",
          {std::move(c)},
          {"sync_async"}};
}

/// Step time per batch of each mode, per compute-to-copy ratio; and the batches of the double
/// mode at the ratio closest to 1 on the copy and compute streams.
figure double_buffer_figure(const runs_t& runs) {
  chart steps{"transfer-double-buffer", "Time per batch: serial, double, triple, ideal", {}};
  steps.config = base_config("bar", steps.title, axis("compute time / copy time", ""),
                             axis("time per batch", "seconds"));
  chart gantt{
      "transfer-double-buffer-batches", "Measured batches on the copy and compute streams", {}};
  gantt.config = base_config("bar", gantt.title, axis("time since the first copy", "seconds"),
                             axis("stream", ""));
  gantt.config["options"]["indexAxis"] = "y";
  gantt.config["options"]["plugins"]["legend"]["display"] = true;
  gantt.tooltip = "range";
  std::vector<std::string> ratio_labels, lanes;
  for (const auto& rr : runs) {
    if (!rr.result.double_buffer) continue;
    const auto& db = *rr.result.double_buffer;
    std::map<std::string, std::vector<std::optional<double>>> modes;
    std::vector<std::optional<double>> ideal;
    std::vector<std::string> labels;
    const double n = static_cast<double>(std::max<std::uint64_t>(db.batches, 1));
    for (const auto& ratio : db.ratios) {
      labels.push_back(fmt::format("{:g}x", ratio.compute_to_copy));
      for (const auto& m : ratio.modes) modes[m.name].emplace_back(m.total_s / n);
      // The first copy and the last compute overlap nothing (as the table's "ideal").
      ideal.emplace_back(
          (db.copy_s + ratio.compute_s + (n - 1) * std::max(db.copy_s, ratio.compute_s)) / n);
    }
    if (ratio_labels.empty()) ratio_labels = labels;
    std::size_t k = 0;
    for (const char* name : {"serial", "double", "triple"})
      if (modes.count(name))
        steps.config["data"]["datasets"].push_back(
            bar_dataset(series_name(rr.label, name), color(k++), rr.index, modes[name]));
    steps.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "ideal"), color(3), rr.index, ideal));

    // The Gantt: the ratio closest to 1, its "double" mode.
    const lessons::double_buffer_ratio* best = nullptr;
    for (const auto& ratio : db.ratios)
      if (!best ||
          std::abs(std::log(ratio.compute_to_copy)) < std::abs(std::log(best->compute_to_copy)))
        best = &ratio;
    const lessons::pipeline_mode_run* mode = nullptr;
    if (best)
      for (const auto& m : best->modes)
        if (m.name == "double") mode = &m;
    if (!mode || mode->batches.empty()) continue;
    const std::string copy_lane = series_name(rr.label, "copy stream");
    const std::string compute_lane = series_name(rr.label, "compute stream");
    lanes.push_back(copy_lane);
    lanes.push_back(compute_lane);
    json copies = json::array(), computes = json::array();
    for (const auto& b : mode->batches) {
      copies.push_back({{"x", {b.copy_start_s, b.copy_end_s}}, {"y", copy_lane}});
      computes.push_back({{"x", {b.compute_start_s, b.compute_end_s}}, {"y", compute_lane}});
    }
    auto copy_ds = bar_dataset(
        series_name(rr.label, fmt::format("copy (H2D, {})", format_bytes(db.batch_bytes))),
        color(0), rr.index, {});
    copy_ds["data"] = std::move(copies);
    auto compute_ds = bar_dataset(
        series_name(rr.label, fmt::format("compute ({:g}x the copy)", best->compute_to_copy)),
        color(1), rr.index, {});
    compute_ds["data"] = std::move(computes);
    for (auto* ds : {&copy_ds, &compute_ds}) {
      (*ds)["borderWidth"] = 1;
      (*ds)["borderColor"] = "rgba(255,255,255,0.8)";
      (*ds)["borderSkipped"] = false;
      (*ds)["grouped"] = false;
      (*ds)["barPercentage"] = 0.8;
    }
    gantt.config["data"]["datasets"].push_back(std::move(copy_ds));
    gantt.config["data"]["datasets"].push_back(std::move(compute_ds));
  }
  steps.config["data"]["labels"] = ratio_labels;
  gantt.config["data"]["labels"] = lanes;
  gantt.height = lanes.size() > 2 ? "normal" : "short";
  figure f{"transfer-double-buffer",
           "transfer",
           "Double-buffering",
           {std::move(steps)},
           {"double_buffer"}};
  if (!lanes.empty()) f.charts.push_back(std::move(gantt));
  return f;
}

/// A heatmap of one peer matrix: cells [from][to], every run's matrix stacked on the y axis.
chart peer_heatmap(const runs_t& runs, const std::string& id, const std::string& title,
                   const std::string& unit,
                   const std::optional<summary> lessons::peer_pair::*member, double scale) {
  chart c{id, title, {}};
  c.config = base_config("matrix", title, axis("to GPU", ""), axis("from GPU", ""));
  c.config["options"]["scales"]["x"]["type"] = "category";
  c.config["options"]["scales"]["y"]["type"] = "category";
  c.config["options"]["scales"]["x"]["offset"] = true;
  c.config["options"]["scales"]["y"]["offset"] = true;
  c.config["options"]["scales"]["x"]["grid"] = {{"display", false}};
  c.config["options"]["scales"]["y"]["grid"] = {{"display", false}};
  c.config["options"]["plugins"]["legend"]["display"] = false;
  c.tooltip = "matrix";
  std::vector<std::string> xs, ys;
  double max_v = 0;
  for (const auto& rr : runs) {
    if (!rr.result.multi_gpu) continue;
    const auto& p = rr.result.multi_gpu->peer;
    const std::size_t n = p.devices.size();
    if (p.cells.size() != n || std::any_of(p.cells.begin(), p.cells.end(),
                                           [n](const auto& row) { return row.size() != n; }))
      throw format_error(fmt::format(
          "{}: results.transfer.multi_gpu.peer: {} device(s) in \"devices\" but a matrix of {} "
          "row(s) in \"cells\" (one row and one column per device)",
          rr.source, n, p.cells.size()));
    for (std::size_t i = 0; i < p.cells.size(); ++i)
      for (std::size_t j = 0; j < p.cells[i].size(); ++j)
        if (const auto& s = p.cells[i][j].*member) max_v = std::max(max_v, s->median * scale);
  }
  for (const auto& rr : runs) {
    if (!rr.result.multi_gpu) continue;
    const auto& p = rr.result.multi_gpu->peer;
    json cells = json::array();
    for (std::size_t i = 0; i < p.cells.size(); ++i) {
      const std::string y = series_name(rr.label, fmt::format("GPU {}", p.devices.at(i)));
      ys.push_back(y);
      for (std::size_t j = 0; j < p.cells[i].size(); ++j) {
        const std::string x = fmt::format("GPU {}", p.devices.at(j));
        if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
        const auto& s = p.cells[i][j].*member;
        if (!s) continue;
        const double v = s->median * scale;
        cells.push_back({{"x", x}, {"y", y}, {"v", v}});
      }
    }
    json ds = {{"label", series_name(rr.label, title)},
               {"data", std::move(cells)},
               {"gbMax", max_v},
               {"gbUnit", unit},
               {"borderWidth", 1}};
    c.config["data"]["datasets"].push_back(std::move(ds));
  }
  c.config["options"]["scales"]["x"]["labels"] = xs;
  c.config["options"]["scales"]["y"]["labels"] = ys;
  c.height = ys.size() > 4 ? "tall" : "short";
  return c;
}

figure peer_figure(const runs_t& runs) {
  figure f{"transfer-peer",
           "transfer",
           "Between GPUs: peer copies",
           {},
           {"p2p_access", "p2p_bandwidth", "p2p_bandwidth_peer_off", "p2p_bidirectional",
            "p2p_bidirectional_peer_off", "p2p_latency"}};
  f.charts.push_back(peer_heatmap(runs, "transfer-peer-bandwidth",
                                  "Peer copy bandwidth, peer access on (GB/s)", "GB/s",
                                  &lessons::peer_pair::uni_peer_on_bytes_per_s, 1 / kGB));
  f.charts.push_back(peer_heatmap(runs, "transfer-peer-latency", "Peer copy latency", "seconds",
                                  &lessons::peer_pair::latency_s, 1.0));
  return f;
}

figure nccl_figure(const runs_t& runs) {
  chart c{"transfer-nccl", "NCCL collectives: algorithm bandwidth against size", {}};
  c.config = base_config("line", c.title, axis("bytes per rank", "bytes", true),
                         axis("algorithm bandwidth (GB/s)", "GB/s", true));
  for (const auto& rr : runs) {
    if (!rr.result.multi_gpu || !rr.result.multi_gpu->nccl) continue;
    const auto& n = *rr.result.multi_gpu->nccl;
    for (std::size_t k = 0; k < n.ops.size(); ++k) {
      std::vector<std::pair<double, double>> xy;
      for (const auto& s : n.sizes)
        for (const auto& o : s.ops)
          if (o.op == n.ops[k] && o.alg_bytes_per_s > 0)
            xy.emplace_back(static_cast<double>(o.bytes), o.alg_bytes_per_s / kGB);
      c.config["data"]["datasets"].push_back(line_dataset(
          series_name(rr.label,
                      fmt::format("{} ({} rank{})", n.ops[k], n.ranks, n.ranks == 1 ? "" : "s")),
          color(k), rr.index, xy));
    }
  }
  return {"transfer-nccl", "transfer", "Between GPUs: NCCL collectives", {std::move(c)}, {"nccl"}};
}

bool any(const runs_t& runs, bool (*has)(const transfer_result&)) {
  return std::any_of(runs.begin(), runs.end(), [&](const auto& rr) { return has(rr.result); });
}

}  // namespace

std::vector<figure> transfer_figures(const std::vector<run_input>& inputs) {
  const auto runs = results_of<transfer_result>(inputs, "transfer");
  std::vector<figure> out;
  if (runs.empty()) return out;
  out.push_back(sweep_figure(runs));
  if (any(runs, [](const transfer_result& r) { return !r.d2d.empty(); }))
    out.push_back(d2d_figure(runs));
  if (any(runs, [](const transfer_result& r) { return r.streams.has_value(); }))
    out.push_back(streams_figure(runs));
  if (any(runs, [](const transfer_result& r) { return !r.sync_async.empty(); }))
    out.push_back(sync_async_figure(runs));
  if (any(runs, [](const transfer_result& r) { return r.double_buffer.has_value(); }))
    out.push_back(double_buffer_figure(runs));
  if (any(runs,
          [](const transfer_result& r) { return r.multi_gpu && !r.multi_gpu->peer.cells.empty(); }))
    out.push_back(peer_figure(runs));
  if (any(runs, [](const transfer_result& r) {
        return r.multi_gpu && r.multi_gpu->nccl && !r.multi_gpu->nccl->sizes.empty();
      }))
    out.push_back(nccl_figure(runs));
  return out;
}

}  // namespace gpu_basics::report::detail

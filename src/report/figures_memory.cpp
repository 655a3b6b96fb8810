// The memory lesson's figures: allocation cost on log axes, allocated and reserved over time,
// fragmentation with and without max_split_size.
#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/memory.hpp"

namespace gpu_basics::report::detail {

namespace {

using lessons::memory_result;
using runs_t = std::vector<run_result<memory_result>>;

figure allocation_cost_figure(const runs_t& runs) {
  chart c{"memory-allocation-cost", "What one allocation costs, across request sizes", {}};
  c.config = base_config("line", c.title, axis("request size", "bytes", true),
                         axis("time per call or pair (host clock, median)", "seconds", true));
  for (const auto& rr : runs) {
    if (!rr.result.allocation_cost) continue;
    using member = double lessons::allocation_cost_row::*;
    static const std::pair<const char*, member> kinds[] = {
        {"cudaMalloc", &lessons::allocation_cost_row::cuda_malloc_s},
        {"cudaFree", &lessons::allocation_cost_row::cuda_free_s},
        {"cudaMallocAsync + cudaFreeAsync", &lessons::allocation_cost_row::malloc_async_pair_s},
        {"caching allocator hit (allocate + free)", &lessons::allocation_cost_row::cached_pair_s}};
    for (std::size_t k = 0; k < std::size(kinds); ++k) {
      std::vector<std::pair<double, double>> xy;
      for (const auto& row : rr.result.allocation_cost->rows)
        if (row.*kinds[k].second > 0)
          xy.emplace_back(static_cast<double>(row.bytes), row.*kinds[k].second);
      c.config["data"]["datasets"].push_back(
          line_dataset(series_name(rr.label, kinds[k].first), color(k), rr.index, xy));
    }
  }
  return {"memory-allocation-cost",
          "memory",
          "Allocation cost",
          {std::move(c)},
          {"allocation_cost", "caching"}};
}

figure timeline_figure(const runs_t& runs) {
  chart c{"memory-timeline", "Allocated and reserved during a forward/backward-like pass", {}};
  c.config = base_config("line", c.title, axis("time since the first allocation", "seconds"),
                         axis("device memory (MiB)", "MiB"));
  for (const auto& rr : runs) {
    if (!rr.result.peak || rr.result.peak->timeline.empty()) continue;
    std::vector<std::pair<double, double>> allocated, reserved;
    for (const auto& s : rr.result.peak->timeline) {
      allocated.emplace_back(s.t_s, static_cast<double>(s.allocated_bytes) * kPerMiB);
      reserved.emplace_back(s.t_s, static_cast<double>(s.reserved_bytes) * kPerMiB);
    }
    for (auto [name, points, k] :
         {std::tuple{"reserved (taken from the device)", &reserved, 1},
          std::tuple{"allocated (handed to the program)", &allocated, 0}}) {
      auto ds = line_dataset(series_name(rr.label, name), color(static_cast<std::size_t>(k)),
                             rr.index, *points);
      ds["stepped"] = "after";
      ds["pointRadius"] = 1.5;
      c.config["data"]["datasets"].push_back(std::move(ds));
    }
  }
  return {"memory-timeline", "memory", "Allocated vs reserved over time", {std::move(c)}, {"peak"}};
}

figure fragmentation_figure(const runs_t& runs) {
  chart c{"memory-fragmentation", "Fragmentation before a second large request", {}};
  c.config =
      base_config("bar", c.title, axis("allocator setting", ""), axis("fragmentation (%)", "%"));
  c.config["options"]["scales"]["y2"] = axis("reserved after the request (MiB)", "MiB");
  c.config["options"]["scales"]["y2"]["position"] = "right";
  c.config["options"]["scales"]["y2"]["grid"] = {{"drawOnChartArea", false}};
  std::vector<std::string> labels;
  for (const auto& rr : runs) {
    if (!rr.result.fragmentation) continue;
    std::vector<std::string> l;
    std::vector<std::optional<double>> frag, reserved;
    for (const auto& row : rr.result.fragmentation->rows) {
      l.push_back(row.max_split_size
                      ? fmt::format("max_split_size {}", format_bytes(*row.max_split_size))
                      : std::string("max_split_size unlimited"));
      frag.emplace_back(row.fragmentation * 100);
      reserved.emplace_back(static_cast<double>(row.reserved_bytes) * kPerMiB);
    }
    if (labels.empty()) labels = l;
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "fragmentation (1 - largest free / free)"), color(1),
                    rr.index, frag));
    auto r = bar_dataset(series_name(rr.label, "reserved"), color(0), rr.index, reserved);
    r["yAxisID"] = "y2";
    c.config["data"]["datasets"].push_back(std::move(r));
  }
  c.config["data"]["labels"] = labels;
  return {"memory-fragmentation", "memory", "Fragmentation", {std::move(c)}, {"fragmentation"}};
}

/// The timeline against the number of requests so far (allocations and frees: the samples where
/// allocated moved), so two runs of the same requests line up whatever their speed.
std::vector<std::pair<double, double>> by_request(const std::vector<lessons::usage_sample>& t,
                                                  bool reserved) {
  std::vector<std::pair<double, double>> xy;
  std::int64_t last = 0;
  double requests = 0;
  for (const auto& s : t) {
    if (s.allocated_bytes != last) ++requests;
    last = s.allocated_bytes;
    xy.emplace_back(requests,
                    static_cast<double>(reserved ? s.reserved_bytes : s.allocated_bytes) * kPerMiB);
  }
  return xy;
}

figure expandable_figure(const runs_t& runs) {
  chart c{"memory-expandable",
          "Reserved over a fragmenting workload: plain vs expandable segments",
          {}};
  json x = axis("allocations and frees so far", "");
  x["type"] = "linear";  // a count: numbers without a unit
  c.config = base_config("line", c.title, std::move(x), axis("device memory (MiB)", "MiB"));
  for (const auto& rr : runs) {
    if (!rr.result.expandable) continue;
    std::size_t k = 0;
    for (const auto& row : rr.result.expandable->rows) {
      auto ds = line_dataset(
          series_name(rr.label, fmt::format("reserved, {}", row.expandable ? "expandable segments"
                                                                           : "plain segments")),
          color(k + 1), rr.index, by_request(row.timeline, true));
      ds["stepped"] = "after";
      ds["pointRadius"] = 0;
      c.config["data"]["datasets"].push_back(std::move(ds));
      ++k;
    }
    if (!rr.result.expandable->rows.empty()) {  // the same requests in both runs
      auto ds = line_dataset(series_name(rr.label, "allocated (both runs)"), color(0), rr.index,
                             by_request(rr.result.expandable->rows.front().timeline, false));
      ds["stepped"] = "after";
      ds["pointRadius"] = 0;
      c.config["data"]["datasets"].push_back(std::move(ds));
    }
  }
  return {"memory-expandable",
          "memory",
          "Expandable segments",
          {std::move(c)},
          {"expandable_segments"}};
}

}  // namespace

std::vector<figure> memory_figures(const std::vector<run_input>& inputs) {
  const auto runs = results_of<memory_result>(inputs, "memory");
  std::vector<figure> out;
  if (runs.empty()) return out;
  const auto has = [&](auto pred) {
    for (const auto& rr : runs)
      if (pred(rr.result)) return true;
    return false;
  };
  if (has([](const memory_result& r) { return r.allocation_cost.has_value(); }))
    out.push_back(allocation_cost_figure(runs));
  if (has([](const memory_result& r) { return r.peak && !r.peak->timeline.empty(); }))
    out.push_back(timeline_figure(runs));
  if (has([](const memory_result& r) { return r.fragmentation.has_value(); }))
    out.push_back(fragmentation_figure(runs));
  if (has([](const memory_result& r) { return r.expandable.has_value(); }))
    out.push_back(expandable_figure(runs));
  return out;
}

}  // namespace gpu_basics::report::detail

// The unified lesson's figures: first-touch rates of managed memory, the oversubscription
// collapse, zero-copy against copy-then-compute, the memory ledger step by step, and the beliefs
// with D2D bandwidth against the working set (L2 marked).
#include <fmt/format.h>

#include "figures.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/unified.hpp"

namespace gpu_basics::report::detail {

namespace {

using lessons::unified_result;
using runs_t = std::vector<run_result<unified_result>>;

std::string touch_label(const lessons::managed_touch& t) {
  return fmt::format("{}: {}", t.direction == "to_gpu" ? "GPU reads" : "CPU reads", t.placement);
}

figure managed_figure(const runs_t& runs) {
  chart c = horizontal_bars("unified-managed", "Managed memory: first touch, by preparation",
                            axis("rate, prefetch included", "GB/s"),
                            axis("who reads first, and what was done before", ""));
  json labels = json::array();
  for (const auto& rr : runs) {
    if (!rr.result.managed) continue;
    std::vector<std::optional<double>> v;
    json l = json::array();
    for (const auto& t : rr.result.managed->touches) {
      l.push_back(touch_label(t));
      v.emplace_back(t.bytes_per_s / 1e9);
    }
    if (labels.empty()) labels = l;
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "first touch"), color(0), rr.index, v));
  }
  c.config["data"]["labels"] = labels;
  c.height = "tall";
  return {"unified-managed", "unified", "Managed memory", {std::move(c)}, {"managed"}};
}

figure oversubscription_figure(const runs_t& runs) {
  chart c{
      "unified-oversubscription", "A pass over a managed working set, past the free memory", {}};
  json x = axis("working set / free device memory", "x");
  c.config = base_config("line", c.title, std::move(x), axis("rate of a pass", "GB/s", true));
  for (const auto& rr : runs) {
    if (!rr.result.managed || !rr.result.managed->oversubscription) continue;
    std::vector<std::pair<double, double>> faults, prefetch;
    for (const auto& p : rr.result.managed->oversubscription->points) {
      faults.emplace_back(p.ratio, p.faults_bytes_per_s / 1e9);
      prefetch.emplace_back(p.ratio, p.prefetch_bytes_per_s / 1e9);
    }
    c.config["data"]["datasets"].push_back(
        line_dataset(series_name(rr.label, "faults"), color(1), rr.index, faults));
    c.config["data"]["datasets"].push_back(
        line_dataset(series_name(rr.label, "prefetch per chunk"), color(0), rr.index, prefetch));
  }
  json fits = reference_line(1.0, "1.0x: the set no longer fits", color(3), true);
  fits["label"]["position"] = "start";  // at the bottom, clear of the resident rates
  annotate(c.config, "fits", std::move(fits));
  return {"unified-oversubscription",
          "unified",
          "Oversubscription",
          {std::move(c)},
          {"oversubscription"}};
}

figure zero_copy_figure(const runs_t& runs) {
  chart c{"unified-zero-copy", "Zero-copy against one bulk copy, by access pattern", {}};
  c.config = base_config("bar", c.title, axis("access", ""), axis("time", "seconds", true));
  json labels = json::array();
  for (const auto& rr : runs) {
    if (!rr.result.zero_copy) continue;
    std::vector<std::optional<double>> mapped, copy;
    json l = json::array();
    for (const auto& r : rr.result.zero_copy->rows) {
      l.push_back(lessons::access_name(r));
      mapped.emplace_back(r.mapped_s);
      copy.emplace_back(r.copy_then_compute_s);
    }
    if (labels.empty()) labels = l;
    c.config["data"]["datasets"].push_back(bar_dataset(
        series_name(rr.label, "kernels read mapped host memory"), color(1), rr.index, mapped));
    c.config["data"]["datasets"].push_back(bar_dataset(
        series_name(rr.label, "copy to the device, then kernels"), color(0), rr.index, copy));
  }
  c.config["data"]["labels"] = labels;
  return {
      "unified-zero-copy", "unified", "Zero-copy", {std::move(c)}, {"zero_copy", "host_access"}};
}

figure ledger_figure(const runs_t& runs) {
  chart c = horizontal_bars("unified-ledger", "Device memory each step added (NVML), fresh process",
                            axis("added by the step", "MiB"), axis("step", ""));
  json labels = json::array();
  std::size_t k = 0;
  for (const auto& rr : runs) {
    if (!rr.result.ledger) continue;
    for (const auto& p : rr.result.ledger->probes) {
      std::vector<std::optional<double>> v;
      json l = json::array();
      for (std::size_t i = 1; i < p.steps.size(); ++i) {
        l.push_back(p.steps[i].label);
        const auto d = lessons::step_delta(p, p.steps[i].step);
        v.emplace_back(d ? std::optional<double>(static_cast<double>(*d) * kPerMiB) : std::nullopt);
      }
      if (labels.empty()) labels = l;
      c.config["data"]["datasets"].push_back(
          bar_dataset(series_name(rr.label, "CUDA_MODULE_LOADING=" + p.module_loading),
                      color(k++ % 2 ? 1 : 0), rr.index, v));
    }
  }
  c.config["data"]["labels"] = labels;
  c.height = "tall";
  return {"unified-ledger", "unified", "The memory ledger", {std::move(c)}, {"ledger"}};
}

/// Belief 1: pageable against pin-then-copy, for one transfer and for the repeated case.
chart pin_chart(const runs_t& runs) {
  chart c{"unified-pin", "Pin then copy against a pageable copy", {}};
  c.config =
      base_config("bar", c.title, axis("transfers", ""), axis("time, host clock", "seconds"));
  json labels = json::array();
  for (const auto& rr : runs) {
    if (!rr.result.beliefs || !rr.result.beliefs->pin) continue;
    const auto& p = *rr.result.beliefs->pin;
    const double k = p.repeats;
    labels = {"one transfer", fmt::format("{} transfers", p.repeats)};
    c.config["data"]["datasets"].push_back(
        bar_dataset(series_name(rr.label, "pageable, copied directly"), color(0), rr.index,
                    {p.pageable_copy_s, k * p.pageable_copy_s}));
    c.config["data"]["datasets"].push_back(bar_dataset(
        series_name(rr.label, "pinned first (cudaHostAlloc + memcpy), then copied"), color(1),
        rr.index, {p.pin_then_copy_once_s, p.pin_allocate_s + p.pin_fill_s + k * p.pinned_copy_s}));
  }
  c.config["data"]["labels"] = labels;
  return c;
}

figure d2d_figure(const runs_t& runs) {
  chart c{"unified-d2d", "D2D copy rate against the working set", {}};
  c.config = base_config("line", c.title, axis("working set (source + destination)", "bytes", true),
                         axis("D2D rate, copied", "GB/s"));
  std::optional<std::uint64_t> l2;
  for (const auto& rr : runs) {
    if (!rr.result.beliefs || !rr.result.beliefs->d2d) continue;
    std::vector<std::pair<double, double>> xy;
    for (const auto& p : rr.result.beliefs->d2d->points)
      xy.emplace_back(static_cast<double>(p.working_set_bytes), p.bytes_per_s / 1e9);
    c.config["data"]["datasets"].push_back(
        line_dataset(series_name(rr.label, "D2D copy"), color(0), rr.index, xy));
    if (!l2) l2 = rr.result.beliefs->d2d->l2_bytes;
  }
  if (l2 && *l2 > 0) {
    json l2_line =
        reference_line(static_cast<double>(*l2), "L2 " + format_bytes(*l2), color(3), true);
    // At the top, right of the line: the L2 sets' peak lies just left of it.
    l2_line["label"]["xAdjust"] = 34;
    l2_line["label"]["yAdjust"] = 0;
    annotate(c.config, "l2", std::move(l2_line));
  }
  json course = reference_line(
      lessons::kCourseHbmBytesPerS / 2 / 1e9,
      fmt::format("course (H100): {:.2f} TB/s r+w", lessons::kCourseHbmBytesPerS / 1e12), color(2));
  course["label"]["position"] = "start";  // at the left, under the L2 rates, clear of HBM's
  annotate(c.config, "course", std::move(course));
  return {"unified-d2d",
          "unified",
          "Five beliefs",
          {std::move(c), pin_chart(runs)},
          {"beliefs", "d2d_sweep"}};
}

}  // namespace

std::vector<figure> unified_figures(const std::vector<run_input>& inputs) {
  const auto runs = results_of<unified_result>(inputs, "unified");
  std::vector<figure> out;
  const auto has = [&](auto pred) {
    for (const auto& rr : runs)
      if (pred(rr.result)) return true;
    return false;
  };
  if (has([](const unified_result& r) { return r.managed.has_value(); }))
    out.push_back(managed_figure(runs));
  if (has([](const unified_result& r) { return r.managed && r.managed->oversubscription; }))
    out.push_back(oversubscription_figure(runs));
  if (has([](const unified_result& r) { return r.zero_copy.has_value(); }))
    out.push_back(zero_copy_figure(runs));
  if (has([](const unified_result& r) { return r.ledger && !r.ledger->probes.empty(); }))
    out.push_back(ledger_figure(runs));
  if (has([](const unified_result& r) { return r.beliefs && r.beliefs->d2d; }))
    out.push_back(d2d_figure(runs));
  return out;
}

}  // namespace gpu_basics::report::detail

// The profile lesson, host-only: its notes, its tables and the sample series for charts (reading
// schema-1 files: v1/profile_v1.cpp). No CUDA header here (tested on the CPU).
#include "gpu_basics/lessons/profile.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/units.hpp"
#include "table_labels.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

using labels::kTimingRows;

bool is_memory_metric(const std::string& m) {
  return m == "memory_used_bytes" || m == "memory_total_bytes";
}

/// The peak a run is measured against: the one kept with it, else the datasheet's.
std::optional<double> peak_of(const matmul_run& run, const device_facts& facts) {
  if (run.peak_flops_per_s) return run.peak_flops_per_s;
  if (!facts.datasheet) return std::nullopt;
  const auto& d = *facts.datasheet;
  const double p = run.precision == "fp16"   ? d.fp16_flops
                   : run.precision == "bf16" ? d.bf16_flops
                   : run.precision == "tf32" ? d.tf32_flops
                   : run.precision == "fp32" ? d.fp32_flops
                                             : 0.0;
  if (p <= 0) return std::nullopt;
  return p;
}

// ---- tables -----------------------------------------------------------------------------------

table timing_table(const timing_methods_result& r) {
  table t;
  t.id = "timing_methods";
  t.title = r.bytes
                ? fmt::format("Timing one kernel three ways (an integer kernel over {}, median)",
                              format_bytes(*r.bytes))
                : std::string("Timing one kernel three ways (an integer kernel, median)");
  t.columns = {{"method", "method"},
               {"median_s", "measured (us)", 1e6, 1},
               {"measures", "what it measures"}};
  for (const auto& row : kTimingRows)
    t.add_row({std::string(row.method), (r.*row.field).median, std::string(row.measures)});
  return t;
}

table key_averages_table(const key_averages_result& r) {
  table t;
  t.id = "key_averages";
  t.title = "Key averages (GPU time from CUDA events, host time from the host clock)";
  t.columns = {{"name", "region"},
               {"calls", "calls"},
               {"gpu_total_s", "GPU total (ms)", 1e3, 3},
               {"gpu_mean_s", "GPU mean (us)", 1e6, 1},
               {"gpu_min_s", "GPU min (us)", 1e6, 1},
               {"gpu_max_s", "GPU max (us)", 1e6, 1},
               {"host_mean_s", "host mean (us)", 1e6, 1}};
  for (const auto& g : r.regions) {
    const double n = static_cast<double>(g.calls);
    t.add_row({g.name, static_cast<std::int64_t>(g.calls), g.gpu_total_s,
               g.calls ? value(g.gpu_total_s / n) : value(std::monostate{}), g.gpu_min_s,
               g.gpu_max_s, g.calls ? value(g.host_total_s / n) : value(std::monostate{})});
  }
  return t;
}

table matmul_table(const matmul_result& r) {
  table t;
  t.id = "matmul";
  t.title = "cuBLASLt matmul (fastest of the heuristic's candidates, random normal inputs)";
  t.columns = {{"precision", "precision"},
               {"shape", "m x n x k"},
               {"candidates", "candidates"},
               {"chosen", "chosen"},
               {"median_flops_per_s", "TFLOP/s", 1e-12, 1},
               {"min_flops_per_s", "min", 1e-12, 1},
               {"max_flops_per_s", "max", 1e-12, 1},
               {"peak_flops_per_s", "peak", 1e-12, 0},
               {"peak_percent", "% of peak", 1.0, 1},
               {"check_error", "check rel. error", 1.0, 6}};
  for (const auto& x : r.runs) {
    const bool peak = x.peak_flops_per_s && *x.peak_flops_per_s > 0;
    t.add_row({x.precision, fmt::format("{} x {} x {}", x.m, x.n, x.k),
               static_cast<std::int64_t>(x.candidates), static_cast<std::int64_t>(x.chosen),
               x.flops_per_s.median, x.flops_per_s.min, x.flops_per_s.max,
               peak ? value(*x.peak_flops_per_s) : value(std::monostate{}),
               peak ? value(percent_of(x.flops_per_s.median, *x.peak_flops_per_s))
                    : value(std::monostate{}),
               x.check_error});
  }
  return t;
}

table nvml_table(const profile_result& r) {
  table t;
  t.id = "nvml";
  if (!r.nvml) {
    t.title = "NVML";
    t.columns = {{"status", "status"}};
    t.add_row({r.nvml_status});
    return t;
  }
  const nvml_sampling& s = *r.nvml;
  t.title =
      fmt::format("NVML during the matmuls ({} samples every {} ms)", s.samples, s.interval_ms);
  t.columns = {{"metric", "metric"},   {"status", "status"},   {"mean", "mean", 1.0, 1},
               {"min", "min", 1.0, 1}, {"max", "max", 1.0, 1}, {"p50", "p50", 1.0, 1},
               {"p95", "p95", 1.0, 1}};
  for (const auto& m : s.metrics) {
    const bool gib = is_memory_metric(m.metric);
    const auto v = [&](const std::optional<double>& x) {
      return x ? value(gib ? *x * kPerGiB : *x) : value(std::monostate{});
    };
    t.add_row({m.metric + (gib ? " (GiB)" : ""), m.status, v(m.mean), v(m.min), v(m.max), v(m.p50),
               v(m.p95)});
  }
  return t;
}

/// The sampler's steady share of a core (a fraction); defined with the notes below.
std::optional<double> steady_fraction(const sampler_cost& c, int interval_ms, int slow_interval_ms);

/// Each NVML call's steady share of a core: its mean CPU per call over its cadence's interval.
double call_share(const nvml_call_row& c) {
  return c.interval_ms > 0 ? c.cpu_us * 1e-6 / (c.interval_ms * 1e-3) : 0.0;
}

/// The calls' summed share of a core (calls never made or never timed add 0).
double calls_share(const nvml_sampling& s) {
  double sum = 0;
  for (const auto& c : s.calls)
    if (c.calls > 0 && c.timed > 0) sum += call_share(c);
  return sum;
}

/// What the sampler thread costs, call by call: the rows sum to "all NVML calls"; the thread's
/// measured steady cost less that sum is what waking up, reading the clock and storing cost.
std::optional<table> nvml_cost_table(const profile_result& r) {
  if (!r.nvml || r.nvml->calls.empty()) return std::nullopt;
  const nvml_sampling& s = *r.nvml;
  table t;
  t.id = "nvml_cost";
  t.title = fmt::format("What the sampler costs, call by call (every {} ms)", s.interval_ms);
  t.columns = {{"call", "NVML call"},
               {"cadence", "cadence"},
               {"interval_ms", "read every (ms)", 1.0, 0},
               {"calls", "calls"},
               {"cpu_us", "CPU per call (us)", 1.0, 1},
               {"core_fraction", "share of a core (%)", 100.0, 3},
               {"changed_every_ms", "value changed every (ms)", 1.0, 0}};
  std::vector<const nvml_call_row*> rows;
  for (const auto& c : s.calls)
    if (c.calls > 0) rows.push_back(&c);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto* a, const auto* b) { return call_share(*a) > call_share(*b); });
  for (const auto* c : rows) {
    t.add_row({c->call, c->cadence, static_cast<std::int64_t>(c->interval_ms),
               static_cast<std::int64_t>(c->calls), c->cpu_us, call_share(*c),
               c->changed_every_ms ? value(*c->changed_every_ms) : value(std::monostate{})});
  }
  const auto summary_row = [&](const char* what, double share) {
    std::vector<value> row(t.columns.size(), value(std::monostate{}));
    row[0] = std::string(what);
    row[1] = std::string();
    row[5] = share;
    t.add_row(std::move(row));
  };
  const double sum = calls_share(s);
  summary_row("all NVML calls", sum);
  if (s.cost && s.slow_interval_ms)
    if (const auto steady = steady_fraction(*s.cost, s.interval_ms, *s.slow_interval_ms)) {
      summary_row("waking, clock reads, storing (the rest)", std::max(0.0, *steady - sum));
      if (s.cost->wake_floor_fraction)
        summary_row("of the rest: a thread that only wakes as often (the floor)",
                    *s.cost->wake_floor_fraction);
      summary_row("the sampler thread, measured", *steady);
    }
  return t;
}

// ---- notes ------------------------------------------------------------------------------------

/// "78.3%" or "70.6-78.5%": the fp16/bf16 runs against their peaks; empty when none has a peak.
std::string tensor_core_share(const matmul_result& r, const device_facts& facts) {
  std::vector<double> pct;
  for (const auto& x : r.runs)
    if (x.precision == "fp16" || x.precision == "bf16")
      if (const auto p = peak_of(x, facts); p && *p > 0)
        pct.push_back(percent_of(x.flops_per_s.median, *p));
  if (pct.empty()) return {};
  const auto [lo, hi] = std::minmax_element(pct.begin(), pct.end());
  const std::string a = fmt::format("{:.1f}", *lo), b = fmt::format("{:.1f}", *hi);
  return a == b ? a + "%" : a + "-" + b + "%";
}

/// Measured tf32 over fp32 at the first shape that has both; nullopt without such a pair.
std::optional<double> measured_tf32_over_fp32(const matmul_result& r) {
  for (const auto& a : r.runs) {
    if (a.precision != "tf32") continue;
    for (const auto& b : r.runs)
      if (b.precision == "fp32" && b.m == a.m && b.n == a.n && b.k == a.k &&
          b.flops_per_s.median > 0)
        return a.flops_per_s.median / b.flops_per_s.median;
  }
  return std::nullopt;
}

std::string tf32_rate_text(const matmul_result& r, const device_facts& facts) {
  const auto meas = measured_tf32_over_fp32(r);
  std::optional<double> sheet;
  if (facts.datasheet && facts.datasheet->fp32_flops > 0)
    sheet = facts.datasheet->tf32_flops / facts.datasheet->fp32_flops;
  if (sheet && meas)
    return fmt::format("{:.1f}x fp32's rate by the datasheet ({:.1f}x measured here)", *sheet,
                       *meas);
  if (sheet) return fmt::format("{:.1f}x fp32's rate by the datasheet", *sheet);
  if (meas) return fmt::format("{:.1f}x fp32's rate measured here", *meas);
  return "a multiple of fp32's rate";
}

std::vector<note> matmul_notes(const matmul_result& r, const device_facts& facts) {
  std::vector<note> n;
  if (facts.datasheet) {
    const auto& d = *facts.datasheet;
    const std::string share = tensor_core_share(r, facts);
    n.push_back(
        {"matmul",
         fmt::format(
             "- Peaks are the {} figures (dense): {:.0f} TFLOP/s fp16/bf16, {:.0f} tf32, {:.0f} "
             "fp32. {}: "
             "the clock drops under full load (power limit), and tiles at the matrix edges and the "
             "epilogue do no tensor-core work.",
             d.source, d.bf16_flops / 1e12, d.tf32_flops / 1e12, d.fp32_flops / 1e12,
             share.empty() ? std::string("Real GEMMs stay below the tensor-core peak")
                           : "Real GEMMs reach " + share + " of the tensor-core peak here")});
  } else {
    n.push_back(
        {"matmul", "- peak unknown: this GPU is not in the datasheet table (hardware.cpp)."});
  }
  n.push_back(
      {"matmul",
       fmt::format(
           "- The heuristic proposes {} (tile sizes, split-K, swizzles); each is timed and the "
           "fastest "
           "kept for the shape: its first guess is not always the best. Each precision's result "
           "was "
           "checked on a small case against a double-precision CPU product ('check rel. error').",
           r.max_candidates ? fmt::format("up to {} algorithms", *r.max_candidates)
                            : std::string("several algorithms"))});
  n.push_back(
      {"matmul",
       fmt::format(
           "- tf32 runs fp32 data on tensor cores with a 10-bit mantissa: {} for a small loss of "
           "precision; fp32 uses the plain FMA units.",
           tf32_rate_text(r, facts))});
  return n;
}

/// The sampler's steady share of a core (a fraction), as sampler::steady_cpu_fraction computes
/// it: a plain sample's CPU per interval plus a slow sample's CPU per slow interval.
std::optional<double> steady_fraction(const sampler_cost& c, int interval_ms,
                                      int slow_interval_ms) {
  if (c.slow_samples == 0 || c.samples_taken <= c.slow_samples || interval_ms <= 0 ||
      slow_interval_ms <= 0)
    return std::nullopt;
  const double fast_each =
      (c.cpu_s - c.slow_cpu_s) / static_cast<double>(c.samples_taken - c.slow_samples);
  const double slow_each = c.slow_cpu_s / static_cast<double>(c.slow_samples);
  return fast_each / (interval_ms * 1e-3) + slow_each / (slow_interval_ms * 1e-3);
}

std::optional<note> sampler_note(const nvml_sampling& s) {
  if (!s.cost || !s.slow_interval_ms) return std::nullopt;
  const sampler_cost& c = *s.cost;
  const auto steady = steady_fraction(c, s.interval_ms, *s.slow_interval_ms);
  if (!steady || c.wall_s <= 0) return std::nullopt;
  const double wall = c.wall_s;
  const std::uint64_t fast_n = c.samples_taken - c.slow_samples;
  return note{
      "nvml",
      fmt::format("- The sampler thread used {:.2f}% of one CPU core over {:.2f} s: "
                  "{:.2f}% in {} reads that include the "
                  "energy counter ({:.1f} ms of CPU each: NVML reads it from the "
                  "board{}) and {:.2f}% in {} plain samples ({:.0f} us "
                  "each, waking up included). So "
                  "at {} ms with the counter read every {:.0f} s, its steady cost is about "
                  "{:.2f}% of a core; over a "
                  "short run the counter's reads at both ends dominate.",
                  100.0 * c.cpu_s / wall, wall, 100.0 * c.slow_cpu_s / wall, c.slow_samples,
                  1e3 * c.slow_cpu_s / static_cast<double>(c.slow_samples),
                  // Results before the cost table said this; the table shows other
                  // calls costing hundreds of microseconds too.
                  s.calls.empty() ? ", while the other metrics come from the driver's cache" : "",
                  100.0 * (c.cpu_s - c.slow_cpu_s) / wall, fast_n,
                  1e6 * (c.cpu_s - c.slow_cpu_s) / static_cast<double>(fast_n), s.interval_ms,
                  *s.slow_interval_ms * 1e-3, 100.0 * *steady)};
}

/// What is read how often. Results that list their calls say it from the calls; older ones
/// (before the calls were recorded) used the split this text names.
std::optional<note> cadence_note(const nvml_sampling& s) {
  if (!s.medium_interval_ms || *s.medium_interval_ms <= s.interval_ms) return std::nullopt;
  const int ratio = *s.medium_interval_ms / std::max(1, s.interval_ms);
  if (s.calls.empty())
    return note{"nvml", fmt::format("- Power, temperature, the memory clock and the clock-event "
                                    "reasons are read every {} ms, the other metrics every {} ms: "
                                    "each NVML call costs CPU, and NVML itself averages power "
                                    "over the last second, so reading those {}x as often would "
                                    "repeat values.",
                                    *s.medium_interval_ms, s.interval_ms, ratio)};
  std::vector<std::string> fast, medium, averaged;
  const nvml_call_row* util = nullptr;
  int averaged_ms = 0;
  for (const auto& c : s.calls) {
    if (c.calls == 0) continue;
    if (c.cadence == "fast") fast.push_back(c.call);
    if (c.cadence == "medium") medium.push_back(c.call);
    if (c.cadence == "averaged") {
      averaged.push_back(c.call);
      averaged_ms = c.interval_ms;
    }
    if (c.call == "nvmlDeviceGetUtilizationRates") util = &c;
  }
  if (averaged_ms <= *s.medium_interval_ms) {  // clamped to the medium interval: read with it
    medium.insert(medium.end(), averaged.begin(), averaged.end());
    averaged.clear();
  }
  if (fast.empty() || medium.empty()) return std::nullopt;
  std::string text =
      fmt::format("- Every {} ms the sampler calls only {}; {} every {} ms", s.interval_ms,
                  fmt::join(fast, ", "), fmt::join(medium, ", "), *s.medium_interval_ms);
  if (!averaged.empty())
    text += fmt::format(
        "; {} every {} ms (a costly call, and NVML averages power over the last second on "
        "Ampere and newer GPUs, GA100 aside)",
        fmt::join(averaged, ", "), averaged_ms);
  text += fmt::format(
      ": each call costs tens of microseconds of CPU (the next table), and reading a value {}x "
      "as often as it changes only repeats it.",
      ratio);
  if (util && util->changed_every_ms)
    text += fmt::format(" NVML refreshed utilization every {:.0f} ms here (median).",
                        *util->changed_every_ms);
  return note{"nvml", text};
}

/// Which call costs most, and whether reading it so often buys anything.
std::optional<note> call_cost_note(const nvml_sampling& s) {
  const nvml_call_row* top = nullptr;
  for (const auto& c : s.calls)
    if (c.calls > 0 && c.timed > 0 && (!top || call_share(c) > call_share(*top))) top = &c;
  const double sum = calls_share(s);
  if (!top || sum <= 0) return std::nullopt;
  std::string text = fmt::format(
      "- The NVML calls take {:.3f}% of a core in all; the costliest is {} ({:.1f} us of CPU "
      "per call, every {} ms: {:.3f}%, {:.0f}% of the calls' cost).",
      100.0 * sum, top->call, top->cpu_us, top->interval_ms, 100.0 * call_share(*top),
      100.0 * call_share(*top) / sum);
  if (top->changed_every_ms && *top->changed_every_ms > 1.5 * top->interval_ms)
    text += fmt::format(
        " Its value changed only every {:.0f} ms (median), so about {:.0f} reads in {:.0f} "
        "repeated the last one.",
        *top->changed_every_ms, *top->changed_every_ms / top->interval_ms - 1.0,
        *top->changed_every_ms / top->interval_ms);
  if (s.cost && s.slow_interval_ms)
    if (const auto steady = steady_fraction(*s.cost, s.interval_ms, *s.slow_interval_ms);
        steady && *steady > sum) {
      text += fmt::format(
          " The rest of the thread's {:.3f}%, {:.3f}%, is waking up every {} ms, reading the "
          "clock and storing the sample.",
          100.0 * *steady, 100.0 * (*steady - sum), s.interval_ms);
      if (const auto floor = s.cost->wake_floor_fraction) {
        text += fmt::format(
            " A thread beside it that only slept to the same deadlines took {:.3f}% of a core: "
            "that much is the OS waking a thread every {} ms on this machine, the floor under "
            "any sampler at this interval",
            100.0 * *floor, s.interval_ms);
        text += *floor < *steady - sum
                    ? fmt::format("; the sampler's own work above it is {:.3f}%.",
                                  100.0 * (*steady - *floor))
                    : std::string(
                          ", as much as the rest or more: at this precision the rest is "
                          "all the OS waking the thread.");
      }
    }
  return note{"nvml_cost", text};
}

std::vector<note> nvml_notes(const profile_result& r) {
  std::vector<note> n;
  if (!r.nvml) {
    n.push_back({"nvml",
                 "- Without NVML there is no utilization, power or clock data; the rest of the "
                 "lesson ran."});
    return n;
  }
  const nvml_sampling& s = *r.nvml;
  n.push_back({"nvml",
               "- Utilization is the share of time a kernel was running over NVML's last sample "
               "period, not "
               "how busy the SMs were: a GEMM and a one-thread kernel can both show 100%."});
  if (s.energy_status == "ok" && s.energy_j && s.energy_s)
    n.push_back({"nvml", fmt::format("- Energy counter: {:.0f} J over {:.2f} s, a mean of {:.0f} W "
                                     "(the power column is NVML's recent "
                                     "average at each sample; the counter integrates all of it).",
                                     *s.energy_j, *s.energy_s,
                                     *s.energy_s > 0 ? *s.energy_j / *s.energy_s : 0.0)});
  else
    n.push_back({"nvml", fmt::format("- Energy counter: {}.", s.energy_status)});
  if (auto c = cadence_note(s)) n.push_back(std::move(*c));
  if (auto c = sampler_note(s)) n.push_back(std::move(*c));
  if (auto c = call_cost_note(s)) n.push_back(std::move(*c));
  if (s.samples_csv_path) n.push_back({"nvml", "- All samples: " + *s.samples_csv_path});
  return n;
}

}  // namespace

std::optional<double> changed_every_ms(const std::vector<gpu_sample>& samples, gpu_metric metric) {
  std::vector<double> change_times;
  std::optional<double> last;
  for (const auto& x : samples) {
    const auto& v = x[metric];
    if (!v.ok()) continue;
    if (last && v.value != *last) change_times.push_back(x.time_s);
    last = v.value;
  }
  if (change_times.size() < 2) return std::nullopt;
  std::vector<double> gaps;
  for (std::size_t i = 1; i < change_times.size(); ++i)
    gaps.push_back(1e3 * (change_times[i] - change_times[i - 1]));
  return summarize(gaps).median;
}

sample_series decimate(sample_series s, std::size_t max_points) {
  if (s.time_s.size() != s.values.size())
    throw format_error("profile: a series' times and values differ in length");
  const std::size_t n = s.values.size();
  s.source_points = std::max<std::uint64_t>(s.source_points, n);
  max_points = std::max<std::size_t>(max_points, 2);
  if (n <= max_points) return s;
  sample_series out;
  out.metric = std::move(s.metric);
  out.source_points = s.source_points;
  out.time_s.reserve(max_points);
  out.values.reserve(max_points);
  for (std::size_t j = 0; j < max_points; ++j) {
    const auto i = static_cast<std::size_t>(std::llround(
        static_cast<double>(j) * static_cast<double>(n - 1) / static_cast<double>(max_points - 1)));
    out.time_s.push_back(s.time_s[i]);
    out.values.push_back(s.values[i]);
  }
  return out;
}

std::vector<sample_series> series_of(const std::vector<gpu_sample>& samples, double origin_s,
                                     std::size_t max_points) {
  std::vector<sample_series> out;
  for (const char* name : kSeriesMetrics) {
    std::size_t k = 0;
    while (k < kGpuMetricCount && metric_name(static_cast<gpu_metric>(k)) != name) ++k;
    if (k == kGpuMetricCount) continue;
    sample_series s;
    s.metric = name;
    for (const auto& smp : samples) {
      const auto& v = smp.values[k];
      if (!v.ok() || !std::isfinite(v.value)) continue;
      s.time_s.push_back(smp.time_s - origin_s);
      s.values.push_back(v.value);
    }
    if (!s.values.empty()) out.push_back(decimate(std::move(s), max_points));
  }
  return out;
}

std::vector<note> explain_profile(const profile_result& r, const device_facts& facts) {
  std::vector<note> n;
  n.push_back(
      {"timing_methods",
       "- Kernel launches are asynchronous: a host timer without synchronization measures the "
       "launch (microseconds), not the work. Synchronizing fixes that but adds launch and wake-up "
       "latency. Events are timestamped by the GPU in stream order: the kernel's own time."});
  n.push_back(
      {"key_averages",
       "- Like torch.profiler's key_averages: per named region, calls and GPU time from events; "
       "'host mean' is the time the CPU spent issuing the region, microseconds against the GPU's "
       "milliseconds: the CPU runs ahead of the GPU."});
  for (auto& x : matmul_notes(r.matmul, facts)) n.push_back(std::move(x));
  for (auto& x : nvml_notes(r)) n.push_back(std::move(x));
  if (r.trace)
    for (auto& x : explain_trace(*r.trace)) n.push_back(std::move(x));
  return n;
}

std::vector<table> present_profile(const profile_result& r) {
  std::vector<table> out;
  out.push_back(timing_table(r.timing));
  out.push_back(key_averages_table(r.key_averages));
  out.push_back(matmul_table(r.matmul));
  out.push_back(nvml_table(r));
  if (auto t = nvml_cost_table(r)) out.push_back(std::move(*t));
  if (r.trace) out.push_back(present_trace(*r.trace));
  return out;
}

lesson profile_lesson() {
  lesson l;
  l.name = "profile";
  l.description = "Lesson: NVML utilization sampling, CUDA-event timing, matmul against the peak";
  l.traces = true;
  l.writes_files = true;
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    return render_typed<profile_result, explain_profile, present_profile>(j, f, "profile");
  };
  l.upgrade_v1 = [](const nlohmann::json& block) { return nlohmann::json(profile_from_v1(block)); };
  return l;
}

}  // namespace gpu_basics::lessons

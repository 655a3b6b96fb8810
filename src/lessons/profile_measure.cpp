// The profile lesson, measured: one kernel timed three ways, key averages of a copy/kernel/copy
// workload (where --trace starts), cuBLASLt matmuls checked against the CPU and then timed under
// the NVML sampler, the samples written to <output.directory>/profile_samples.csv, and the trace.
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/profiler/gemm.hpp"
#include "gpu_basics/profiler/gemm_runner.hpp"
#include "gpu_basics/profiler/gpu_timer.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/profiler/timing.hpp"
#include "gpu_basics/transfer/pipeline.hpp"

namespace gpu_basics::lessons {

matmul_run matmul_of(const gemm_result& res, double check_error,
                     std::optional<double> peak_flops_per_s) {
  matmul_run x;
  x.precision = std::string(to_string(res.precision));
  x.m = res.shape.m;
  x.n = res.shape.n;
  x.k = res.shape.k;
  x.candidates = res.candidates;
  x.chosen = res.chosen;
  x.candidate_median_s = res.candidate_median_s;
  x.seconds = res.seconds;
  x.flops_per_s = res.flops_per_s;
  x.peak_flops_per_s = peak_flops_per_s;
  x.check_error = check_error;
  x.sampling = res.sampling;
  return x;
}

namespace {

constexpr std::size_t kBytes = 64u << 20;  // the timing and key-averages buffers
constexpr unsigned kTimingLcg = 1000;      // LCG steps of the timed kernel
constexpr unsigned kAveragesLcg = 200;     // LCG steps of the key-averages kernel
constexpr int kMaxCandidates = 8;          // algorithms asked of the cuBLASLt heuristic

/// Walks the lesson's progress: timing, key averages, then each matmul.
struct progress {
  const context& ctx;
  int total;
  int done = 0;
  void next(const std::string& item) { ctx.report_progress(item, done++, total); }
  void finish() const { ctx.report_progress("profile", total, total); }
};

// ---- 1. three ways to time a kernel -----------------------------------------------------------

timing_methods_result measure_timing(const config& cfg, cuda_stream& s) {
  timing_methods_result r;
  r.bytes = kBytes;
  r.lcg_iterations = kTimingLcg;
  r.warmup = cfg.benchmark.warmup_iterations;
  r.iterations = cfg.benchmark.iterations;
  device_buffer data(kBytes), sum(sizeof(unsigned long long));
  enqueue_fill_pattern(data.data(), kBytes, 3, s);
  const auto launch = [&] {
    enqueue_lcg_checksum(data.data(), kBytes, kTimingLcg, sum.as<unsigned long long>(), s);
  };
  for (int i = 0; i < cfg.benchmark.warmup_iterations; ++i) launch();
  s.synchronize();
  std::vector<double> no_sync, with_sync, events;
  cuda_event a, b;
  // One sample of each way per call; the stopping rule follows the events' time (the true one).
  const stopping_rule rule = without_warmup(cfg.benchmark.rule());  // warmed up above
  r.sampling = sample_each(rule, events, [&] {
    double t0 = host_seconds();
    launch();
    no_sync.push_back(host_seconds() - t0);
    s.synchronize();
    t0 = host_seconds();
    launch();
    s.synchronize();
    with_sync.push_back(host_seconds() - t0);
    a.record(s);
    launch();
    b.record(s);
    b.synchronize();
    return cuda_event::elapsed_s(a, b);
  });
  r.host_no_sync_s = summarize(no_sync);
  r.host_sync_s = summarize(with_sync);
  r.events_s = summarize(events);
  return r;
}

// ---- 2. key averages of a small workload (the trace starts here) ------------------------------

key_averages_result measure_key_averages(context& ctx, cuda_stream& s,
                                         std::unique_ptr<trace_session>& trace) {
  const int iters = ctx.cfg.benchmark.iterations;
  key_averages_result r;
  r.bytes = kBytes;
  r.lcg_iterations = kAveragesLcg;
  r.steps = iters;
  pinned_buffer host(kBytes);
  device_buffer data(kBytes), sum(sizeof(unsigned long long));
  enqueue_fill_pattern(data.data(), kBytes, 5, s);
  timing_registry reg;
  // --trace: step 0 (first use of the buffers) is left out, step 1 warms the tracer up, and it
  // stays on from step 2 through the matmuls.
  trace = start_trace(ctx, iters >= 3 ? trace_schedule{1, 1, 0} : trace_schedule{0, 0, 0});
  {
    gpu_timing timing(reg);
    for (int i = 0; i < iters; ++i) {
      if (trace) trace->step();
      scoped_range step(fmt::format("step {}", i));
      {
        gpu_timing::scope sc(timing, "H2D copy 64 MiB (pinned)", s);
        GPU_BASICS_CUDA_TRY(
            cudaMemcpyAsync(data.data(), host.data(), kBytes, cudaMemcpyHostToDevice, s.value()));
      }
      {
        gpu_timing::scope sc(timing, "integer kernel 64 MiB", s);
        enqueue_lcg_checksum(data.data(), kBytes, kAveragesLcg, sum.as<unsigned long long>(), s);
      }
      {
        gpu_timing::scope sc(timing, "D2H copy 64 MiB (pinned)", s);
        GPU_BASICS_CUDA_TRY(
            cudaMemcpyAsync(host.data(), data.data(), kBytes, cudaMemcpyDeviceToHost, s.value()));
      }
    }
    timing.flush();
  }
  for (const auto& g : reg.regions())
    r.regions.push_back({g.name, static_cast<std::uint64_t>(g.calls), g.gpu_total_s, g.gpu_min_s,
                         g.gpu_max_s, g.host_total_s});
  return r;
}

// ---- 3. matmul against the peak, under the sampler --------------------------------------------

/// The sampler of the configured device, or nullptr with *why set.
std::shared_ptr<sampler> make_sampler(const context& ctx, std::string* why) {
  *why = ctx.nvml_status;
  if (!ctx.nv) return nullptr;
  const device_info& dev = ctx.device();
  const auto h = ctx.nv->device_by_pci_bus_id(dev.pci_bus_id);
  if (!h.ok()) {
    *why = fmt::format("NVML does not find {} ({})", dev.pci_bus_id, to_string(h.status));
    return nullptr;
  }
  return std::make_shared<sampler>(std::make_shared<nvml_metric_source>(ctx.nv, h.value),
                                   ctx.cfg.profiler.sample_interval_ms, sampler::kCapacity,
                                   sampler::kSlowIntervalMs, sampler::kMediumIntervalMs,
                                   ctx.cfg.profiler.power_interval_ms);
}

struct checked_precision {
  gemm_precision p;
  double error;
};

/// Every configured precision checked on a small case against the CPU (not sampled).
std::vector<checked_precision> check_precisions(gemm_runner& gemm, const config& cfg,
                                                cuda_stream& s) {
  std::vector<checked_precision> out;
  const auto n = static_cast<std::uint64_t>(cfg.profiler.matmul.check_size);
  for (const auto& name : cfg.profiler.matmul.precisions) {
    const auto p = parse_gemm_precision(name);
    if (!p)
      throw logic_error("profiler.matmul.precisions: unknown precision '" + name +
                        "' passed validation");
    const double err = gemm.check(*p, n, s);
    if (!(err <= gemm_tolerance(*p)))
      throw verification_error(
          fmt::format("{} GEMM {}^3: relative error {:.3g} against the CPU exceeds {:.3g}", name, n,
                      err, gemm_tolerance(*p)));
    out.push_back({*p, err});
  }
  return out;
}

/// The timed matmuls, each run's start and end in seconds from `origin` (host_seconds()).
matmul_result measure_matmuls(const context& ctx, cuda_stream& s, gemm_runner& gemm,
                              const std::vector<checked_precision>& checks, double origin,
                              progress& prog) {
  const config& cfg = ctx.cfg;
  const auto sheet = find_datasheet(ctx.device().name);
  matmul_result r;
  r.max_candidates = kMaxCandidates;
  r.check_size = static_cast<std::uint64_t>(cfg.profiler.matmul.check_size);
  r.workspace_bytes = cfg.profiler.matmul.workspace_bytes;
  r.warmup = cfg.benchmark.warmup_iterations;
  r.iterations = cfg.benchmark.iterations;
  for (const auto& sh : cfg.profiler.matmul.shapes)
    for (const auto& c : checks) {
      const gemm_shape shape{static_cast<std::uint64_t>(sh.dims[0]),
                             static_cast<std::uint64_t>(sh.dims[1]),
                             static_cast<std::uint64_t>(sh.dims[2])};
      const std::string what =
          fmt::format("matmul {} {}x{}x{}", to_string(c.p), shape.m, shape.n, shape.k);
      prog.next(what);
      spdlog::info("{}", what);
      scoped_range range(what);
      const double start = host_seconds() - origin;
      const auto res = gemm.run(c.p, shape, cfg.benchmark.rule(), s);
      const double peak = sheet ? datasheet_peak_flops(*sheet, c.p) : 0;
      matmul_run x = matmul_of(res, c.error, peak > 0 ? std::optional(peak) : std::nullopt);
      x.start_s = start;
      x.end_s = host_seconds() - origin;
      r.runs.push_back(std::move(x));
    }
  return r;
}

// ---- 4. what NVML saw during the matmuls ------------------------------------------------------

std::vector<nvml_metric_row> metric_rows(const std::vector<gpu_sample>& samples) {
  std::vector<nvml_metric_row> out;
  for (const auto& m : summarize_samples(samples)) {
    if (m.metric == gpu_metric::pcie_tx_bytes_per_s ||
        m.metric == gpu_metric::pcie_rx_bytes_per_s ||
        m.metric == gpu_metric::clock_event_reasons || m.metric == gpu_metric::energy_j)
      continue;  // not sampled (PCIe) / a bitmask / a counter, shown as energy used
    nvml_metric_row row;
    row.metric = std::string(metric_name(m.metric));
    row.status = std::string(to_string(m.status));
    row.samples = m.samples;
    if (m.status == metric_status::ok) {
      row.mean = m.mean;
      row.min = m.min;
      row.max = m.max;
      row.p50 = m.p50;
      row.p95 = m.p95;
    }
    out.push_back(std::move(row));
  }
  return out;
}

nvml_sampling sampling_of(const sampler& smp, const wake_floor& floor,
                          const std::vector<gpu_sample>& samples, const config& cfg,
                          double origin) {
  nvml_sampling r;
  r.interval_ms = cfg.profiler.sample_interval_ms;
  r.slow_interval_ms = smp.slow_interval_ms();
  r.medium_interval_ms = smp.medium_interval_ms();
  r.averaged_interval_ms = smp.averaged_interval_ms();
  r.samples = samples.size();
  r.dropped = smp.dropped();
  r.metrics = metric_rows(samples);
  const energy_use e = energy_between(samples);
  r.energy_status = std::string(to_string(e.status));
  if (e.status == metric_status::ok) {
    r.energy_j = e.joules;
    r.energy_s = e.seconds;
  }
  sampler_cost c;
  c.cpu_s = smp.cpu_seconds();
  c.wall_s = smp.wall_seconds();
  c.slow_cpu_s = smp.slow_cpu_seconds();
  c.slow_samples = smp.slow_samples();
  c.samples_taken = samples.size() + smp.dropped();
  if (floor.wall_seconds() > 0) c.wake_floor_fraction = floor.cpu_seconds() / floor.wall_seconds();
  r.cost = c;
  for (const auto& k : smp.source().call_costs()) {
    nvml_call_row row;
    row.call = k.call;
    for (const auto m : k.metrics) row.metrics.emplace_back(metric_name(m));
    row.cadence = std::string(to_string(k.cadence));
    row.interval_ms = smp.interval_ms_of(k.cadence);
    row.calls = k.calls;
    row.timed = k.timed;
    row.cpu_us = 1e6 * k.cpu_each_s();
    if (!k.metrics.empty()) row.changed_every_ms = changed_every_ms(samples, k.metrics.front());
    r.calls.push_back(std::move(row));
  }
  r.series = series_of(samples, origin);
  // The samples themselves, all of them: an output of the lesson beside the result.
  const std::string csv =
      (std::filesystem::path(cfg.output.directory) / "profile_samples.csv").string();
  write_file_atomically(csv, samples_csv(samples));
  r.samples_csv_path = csv;
  return r;
}

}  // namespace

profile_result measure_profile(context& ctx) {
  const config& cfg = ctx.cfg;
  profile_result r;
  progress prog{ctx, 2 + static_cast<int>(cfg.profiler.matmul.shapes.size() *
                                          cfg.profiler.matmul.precisions.size())};
  cuda_stream s;
  std::unique_ptr<trace_session> trace;

  prog.next("timing methods");
  r.timing = measure_timing(cfg, s);
  prog.next("key averages");
  r.key_averages = measure_key_averages(ctx, s, trace);

  const std::shared_ptr<sampler> smp = make_sampler(ctx, &r.nvml_status);
  gemm_runner gemm(cfg.profiler.matmul.workspace_bytes, kMaxCandidates);
  const auto checks = check_precisions(gemm, cfg, s);
  const double origin = host_seconds();
  // Beside the sampler, a thread that only wakes at the same interval: the floor under its cost.
  wake_floor floor(cfg.profiler.sample_interval_ms);
  if (smp) {
    floor.start();
    smp->start();
  }
  r.matmul = measure_matmuls(ctx, s, gemm, checks, origin, prog);
  std::vector<gpu_sample> samples;
  if (smp) {
    smp->stop();
    floor.stop();
    samples = smp->samples();
    r.nvml = sampling_of(*smp, floor, samples, cfg, origin);
  }
  if (trace) r.trace = write_trace(ctx, *trace, smp ? &samples : nullptr, nullptr);
  prog.finish();
  return r;
}

}  // namespace gpu_basics::lessons

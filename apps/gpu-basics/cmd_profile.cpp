// `gpu-basics profile`: why CUDA events, key averages of a small workload, cuBLASLt matmul
// against the datasheet peak, and NVML utilization, power and clocks sampled under that load.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/profiler/gemm_runner.hpp"
#include "gpu_basics/profiler/gpu_timer.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/pipeline.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "lesson.hpp"
#include "trace_output.hpp"

namespace gpu_basics::cli {

report run_profile(context& ctx) {
  const config& cfg = ctx.cfg;
  const device_info& dev = ctx.device();
  const auto sheet = find_datasheet(dev.name);
  const int iters = cfg.benchmark.iterations;
  report r;
  r.command = "profile";
  cuda_stream s;
  std::unique_ptr<trace_session> trace;

  // ---- 1. three ways to time a kernel -------------------------------------------------------
  {
    const std::size_t bytes = 64u << 20;
    device_buffer data(bytes), sum(sizeof(unsigned long long));
    enqueue_fill_pattern(data.data(), bytes, 3, s);
    const auto launch = [&] { enqueue_lcg_checksum(data.data(), bytes, 1000, sum.as<unsigned long long>(), s); };
    for (int i = 0; i < cfg.benchmark.warmup_iterations; ++i) launch();
    s.synchronize();
    std::vector<double> no_sync, with_sync, events;
    cuda_event a, b;
    for (int i = 0; i < iters; ++i) {
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
      events.push_back(cuda_event::elapsed_s(a, b));
    }
    table t;
    t.id = "timing_methods";
    t.title = "Timing one kernel three ways (an integer kernel over 64 MiB, median)";
    t.columns = {{"method", "method"}, {"median_s", "measured (us)", 1e6, 1}, {"measures", "what it measures"}};
    t.add_row({std::string("host clock around the launch"), summarize(no_sync).median,
               std::string("only the launch: the call returns before the kernel runs")});
    t.add_row({std::string("host clock + cudaStreamSynchronize"), summarize(with_sync).median,
               std::string("launch + kernel + the wake-up of the waiting thread")});
    t.add_row({std::string("CUDA events around the kernel"), summarize(events).median,
               std::string("the kernel on the GPU's own clock")});
    t.notes.push_back(
        "- Kernel launches are asynchronous: a host timer without synchronization measures the "
        "launch (microseconds), not the work. Synchronizing fixes that but adds launch and wake-up "
        "latency. Events are timestamped by the GPU in stream order: the kernel's own time.");
    r.tables.push_back(std::move(t));
  }

  // ---- 2. key averages of a small workload ----------------------------------------------------
  {
    const std::size_t bytes = 64u << 20;
    pinned_buffer host(bytes);
    device_buffer data(bytes), sum(sizeof(unsigned long long));
    enqueue_fill_pattern(data.data(), bytes, 5, s);
    timing_registry reg;
    // --trace: the trace starts here. Step 0 (first use of the buffers) is left out, step 1 warms
    // the tracer up, and it stays on from step 2 through the matmuls below.
    trace = start_trace(ctx, iters >= 3 ? trace_schedule{1, 1, 0} : trace_schedule{0, 0, 0});
    {
      gpu_timing timing(reg);
      for (int i = 0; i < iters; ++i) {
        if (trace) trace->step();
        scoped_range step(fmt::format("step {}", i));
        {
          gpu_timing::scope sc(timing, "H2D copy 64 MiB (pinned)", s);
          GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(data.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.value()));
        }
        {
          gpu_timing::scope sc(timing, "integer kernel 64 MiB", s);
          enqueue_lcg_checksum(data.data(), bytes, 200, sum.as<unsigned long long>(), s);
        }
        {
          gpu_timing::scope sc(timing, "D2H copy 64 MiB (pinned)", s);
          GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(host.data(), data.data(), bytes, cudaMemcpyDeviceToHost, s.value()));
        }
      }
      timing.flush();
    }
    table t = reg.key_averages();
    t.notes.push_back(
        "- Like torch.profiler's key_averages: per named region, calls and GPU time from events; "
        "'host mean' is the time the CPU spent issuing the region, microseconds against the GPU's "
        "milliseconds: the CPU runs ahead of the GPU.");
    r.tables.push_back(std::move(t));
  }

  // ---- 3. matmul against the peak, with NVML sampling ----------------------------------------
  std::shared_ptr<sampler> smp;
  if (ctx.nv) {
    const auto h = ctx.nv->device_by_pci_bus_id(dev.pci_bus_id);
    if (h.ok()) smp = std::make_shared<sampler>(std::make_shared<nvml_metric_source>(ctx.nv, h.value),
                                               cfg.profiler.sample_interval_ms);
  }
  {
    gemm_runner gemm(cfg.profiler.matmul.workspace_bytes);
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
    // The checks first (small, not sampled), then the timed runs under the sampler.
    std::vector<std::pair<gemm_precision, double>> checks;
    for (const auto& name : cfg.profiler.matmul.precisions) {
      const gemm_precision p = *parse_gemm_precision(name);
      const double err = gemm.check(p, static_cast<std::uint64_t>(cfg.profiler.matmul.check_size), s);
      if (!(err <= gemm_tolerance(p)))
        throw verification_error(fmt::format("{} GEMM {}^3: relative error {:.3g} against the CPU exceeds {:.3g}",
                                             name, cfg.profiler.matmul.check_size, err, gemm_tolerance(p)));
      checks.emplace_back(p, err);
    }
    if (smp) smp->start();
    for (const auto& sh : cfg.profiler.matmul.shapes)
      for (const auto& [p, err] : checks) {
        const gemm_shape shape{static_cast<std::uint64_t>(sh.dims[0]), static_cast<std::uint64_t>(sh.dims[1]),
                               static_cast<std::uint64_t>(sh.dims[2])};
        spdlog::info("matmul {} {}x{}x{}", to_string(p), shape.m, shape.n, shape.k);
        scoped_range range(fmt::format("matmul {} {}x{}x{}", to_string(p), shape.m, shape.n, shape.k));
        const auto res = gemm.run(p, shape, cfg.benchmark.warmup_iterations, iters, s);
        const double peak = sheet ? datasheet_peak_flops(*sheet, p) : 0.0;
        t.add_row({std::string(to_string(p)), fmt::format("{} x {} x {}", shape.m, shape.n, shape.k),
                   static_cast<std::int64_t>(res.candidates), static_cast<std::int64_t>(res.chosen),
                   res.flops_per_s.median, res.flops_per_s.min, res.flops_per_s.max,
                   peak > 0 ? value(peak) : value(std::monostate{}),
                   peak > 0 ? value(percent_of(res.flops_per_s.median, peak)) : value(std::monostate{}), err});
        r.extra["matmul"].push_back({{"precision", to_string(p)},
                                     {"m", shape.m}, {"n", shape.n}, {"k", shape.k},
                                     {"candidate_median_s", res.candidate_median_s},
                                     {"chosen", res.chosen},
                                     {"seconds", res.seconds},
                                     {"flops_per_s", res.flops_per_s},
                                     {"check_max_relative_error", err}});
      }
    if (smp) smp->stop();
    if (sheet)
      t.notes.push_back(fmt::format(
          "- Peaks are the {} figures (dense): {:.0f} TFLOP/s fp16/bf16, {:.0f} tf32, {:.0f} fp32. Real GEMMs "
          "reach ~75-80% of the tensor-core peak: the clock drops under full load (power limit), and "
          "tiles at the matrix edges and the epilogue do no tensor-core work.",
          sheet->source, sheet->bf16_flops / 1e12, sheet->tf32_flops / 1e12, sheet->fp32_flops / 1e12));
    else
      t.notes.push_back("- peak unknown: this GPU is not in the datasheet table (hardware.cpp).");
    t.notes.push_back(
        "- The heuristic proposes up to 8 algorithms (tile sizes, split-K, swizzles); each is timed and "
        "the fastest kept for the shape: its first guess is not always the best. Each precision's "
        "result was checked on a small case against a double-precision CPU product ('check rel. error').");
    t.notes.push_back(
        "- tf32 runs fp32 data on tensor cores with a 10-bit mantissa: ~7x fp32's rate for a small loss "
        "of precision; fp32 uses the plain FMA units.");
    r.tables.push_back(std::move(t));
  }

  // ---- 4. what NVML saw during the matmuls ----------------------------------------------------
  if (smp) {
    const auto samples = smp->samples();
    table t;
    t.id = "nvml";
    t.title = fmt::format("NVML during the matmuls ({} samples every {} ms)", samples.size(), cfg.profiler.sample_interval_ms);
    t.columns = {{"metric", "metric"}, {"status", "status"}, {"mean", "mean", 1.0, 1}, {"min", "min", 1.0, 1},
                 {"max", "max", 1.0, 1}, {"p50", "p50", 1.0, 1}, {"p95", "p95", 1.0, 1}};
    for (const auto& m : summarize_samples(samples)) {
      if (m.metric == gpu_metric::pcie_tx_bytes_per_s || m.metric == gpu_metric::pcie_rx_bytes_per_s ||
          m.metric == gpu_metric::clock_event_reasons || m.metric == gpu_metric::energy_j)
        continue;  // not sampled (PCIe) / a bitmask / a counter, shown below as energy used
      const bool ok = m.status == metric_status::ok;
      const auto v = [&](double x) { return ok ? value(x) : value(std::monostate{}); };
      double scale = 1.0;
      if (m.metric == gpu_metric::memory_used_bytes || m.metric == gpu_metric::memory_total_bytes) scale = 1.0 / (1ull << 30);
      t.add_row({std::string(metric_name(m.metric)) + (scale != 1.0 ? " (GiB)" : ""), std::string(to_string(m.status)),
                 v(m.mean * scale), v(m.min * scale), v(m.max * scale), v(m.p50 * scale), v(m.p95 * scale)});
    }
    const double cpu_pct = smp->wall_seconds() > 0 ? 100.0 * smp->cpu_seconds() / smp->wall_seconds() : 0.0;
    t.notes.push_back(
        "- Utilization is the share of time a kernel was running over NVML's last sample period, not "
        "how busy the SMs were: a GEMM and a one-thread kernel can both show 100%.");
    const energy_use e = energy_between(samples);
    if (e.status == metric_status::ok)
      t.notes.push_back(fmt::format(
          "- Energy counter: {:.0f} J over {:.2f} s, a mean of {:.0f} W (the power column is NVML's recent "
          "average at each sample; the counter integrates all of it).",
          e.joules, e.seconds, e.mean_watts()));
    else
      t.notes.push_back(fmt::format("- Energy counter: {}.", to_string(e.status)));
    const double wall = smp->wall_seconds();
    const std::size_t fast_n = samples.size() > smp->slow_samples() ? samples.size() - smp->slow_samples() : 0;
    t.notes.push_back(fmt::format(
        "- The sampler thread used {:.2f}% of one CPU core over {:.2f} s: {:.2f}% in {} reads that include the "
        "energy counter ({:.1f} ms of CPU each: NVML reads it from the board, while the other metrics come "
        "from the driver's cache) and {:.2f}% in {} plain samples ({:.0f} us each, waking up included). So "
        "at {} ms with the counter read every {:.0f} s, its steady cost is about {:.2f}% of a core; over a "
        "short run the counter's reads at both ends dominate.",
        cpu_pct, wall, wall > 0 ? 100.0 * smp->slow_cpu_seconds() / wall : 0.0, smp->slow_samples(),
        smp->slow_samples() ? 1e3 * smp->slow_cpu_seconds() / static_cast<double>(smp->slow_samples()) : 0.0,
        wall > 0 ? 100.0 * (smp->cpu_seconds() - smp->slow_cpu_seconds()) / wall : 0.0, fast_n,
        fast_n ? 1e6 * (smp->cpu_seconds() - smp->slow_cpu_seconds()) / static_cast<double>(fast_n) : 0.0,
        cfg.profiler.sample_interval_ms, smp->slow_interval_ms() * 1e-3, 100.0 * smp->steady_cpu_fraction()));
    const std::string csv = (std::filesystem::path(cfg.output.directory) / "profile_samples.csv").string();
    write_file_atomically(csv, samples_csv(samples));
    t.notes.push_back("- All samples: " + csv);
    r.extra["nvml_samples"] = samples_json(samples);
    r.extra["sampler_cpu_percent"] = cpu_pct;
    r.extra["sampler_steady_cpu_percent"] = 100.0 * smp->steady_cpu_fraction();
    r.tables.push_back(std::move(t));
  } else {
    table t;
    t.id = "nvml";
    t.title = "NVML";
    t.columns = {{"status", "status"}};
    t.add_row({ctx.nvml_status});
    t.notes.push_back("- Without NVML there is no utilization, power or clock data; the rest of the lesson ran.");
    r.tables.push_back(std::move(t));
  }
  if (trace) {
    const auto samples = smp ? smp->samples() : std::vector<gpu_sample>{};
    write_trace(ctx, *trace, r, smp ? &samples : nullptr, nullptr);
  }
  return r;
}

}  // namespace gpu_basics::cli

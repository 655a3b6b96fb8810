// The double-buffering part of `gpu-basics transfer`: copy batch i+1 while computing batch i,
// for several compute/copy ratios; serial vs double vs triple vs ideal, verified checksums, and
// a Chrome/Perfetto trace of the timelines.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/pattern.hpp"
#include "gpu_basics/transfer/pipeline.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "lesson.hpp"
#include "trace_output.hpp"

namespace gpu_basics::cli {

namespace {

struct mode_result {
  std::string name;
  std::size_t depth;  // 0 = serial
  pipeline_run run;
};

nlohmann::json timeline_json(const pipeline_run& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& b : r.batches)
    a.push_back({{"copy_start_s", b.copy_start_s}, {"copy_end_s", b.copy_end_s},
                 {"compute_start_s", b.compute_start_s}, {"compute_end_s", b.compute_end_s}});
  return a;
}

}  // namespace

void add_double_buffer(context& ctx, report& r) {
  const auto& db = ctx.cfg.transfer.double_buffer;
  if (!db.enabled) {
    if (ctx.trace_path)
      spdlog::warn("--trace: transfer traces its double-buffering run, which transfer.double_buffer.enabled: "
                   "false turns off; no trace written");
    return;
  }
  const std::size_t bytes = db.batch_bytes;
  const auto batches = static_cast<std::size_t>(db.batches);
  const int reps = std::max(3, std::min(ctx.cfg.benchmark.iterations, 7));

  // Pinned source batches, each with its own pattern.
  pinned_buffer host(bytes * batches);
  std::vector<const void*> sources;
  thread_pool pool(default_thread_count());
  for (std::size_t i = 0; i < batches; ++i) {
    auto* p = static_cast<std::byte*>(host.data()) + i * bytes;
    pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t n) {
      fill_pattern_host(p + off, n, static_cast<std::uint32_t>(i), off);
    });
    sources.push_back(p);
  }
  device_buffer sums(batches * sizeof(unsigned long long));
  cuda_stream side;

  // Calibrate: copy time of one batch, and compute time as a + b * iterations.
  copy_bench bench({ctx.cfg.benchmark.warmup_iterations, 10});
  const double copy_s = bench.copy(copy_direction::h2d, host_memory::pinned, bytes).time_s.median;
  device_buffer probe(bytes);
  enqueue_fill_pattern(probe.data(), bytes, 7, side);
  const auto time_compute = [&](unsigned k) {
    std::vector<double> t;
    cuda_event a, b;
    for (int i = 0; i < 5; ++i) {
      a.record(side);
      enqueue_lcg_checksum(probe.data(), bytes, k, sums.as<unsigned long long>(), side);
      b.record(side);
      b.synchronize();
      t.push_back(cuda_event::elapsed_s(a, b));
    }
    return summarize(t).median;
  };
  (void)time_compute(4);
  const unsigned k1 = 16, k2 = 1024;
  const double t1 = time_compute(k1), t2 = time_compute(k2);
  const double per_iter = std::max(1e-12, (t2 - t1) / (k2 - k1));
  const double base = std::max(0.0, t1 - per_iter * k1);

  table t;
  t.id = "double_buffer";
  t.title = fmt::format("Double-buffering: {} batches of {} (pinned), copy stream + compute stream",
                        batches, format_bytes(bytes));
  t.columns = {{"compute_to_copy", "compute/copy", 1.0, 2},
               {"copy_s", "copy (ms)", 1e3, 2},
               {"compute_s", "compute (ms)", 1e3, 2},
               {"serial_step_s", "serial (ms/batch)", 1e3, 3},
               {"double_step_s", "double (ms/batch)", 1e3, 3},
               {"triple_step_s", "triple (ms/batch)", 1e3, 3},
               {"ideal_step_s", "ideal (ms/batch)", 1e3, 3},
               {"speedup", "double x serial", 1.0, 2},
               {"double_efficiency", "double eff %", 100.0, 1},
               {"triple_efficiency", "triple eff %", 100.0, 1},
               {"bound", "bound"}};
  trace_writer trace;
  nlohmann::json timelines = nlohmann::json::array();
  std::int64_t pid = 0;
  double closest_to_one = 1e300;
  std::vector<std::pair<std::string, pipeline_run>> traced;
  unsigned traced_k = 1;

  for (double ratio : db.compute_to_copy) {
    const double target = ratio * copy_s;
    const auto k = static_cast<unsigned>(std::max(1.0, std::round((target - base) / per_iter)));
    const double compute_s = time_compute(k);
    // The host reference checksum of every batch for this k.
    std::vector<unsigned long long> want(batches);
    pool.parallel_for(batches, [&](std::size_t i) {
      want[i] = lcg_checksum_of_pattern(bytes, static_cast<std::uint32_t>(i), k);
    });
    const auto compute = [&](stream_view s, const void* dev, std::size_t batch) {
      enqueue_lcg_checksum(dev, bytes, k, sums.as<unsigned long long>() + batch, s);
    };
    std::vector<mode_result> modes = {{"serial", 0, {}}, {"double", 2, {}}, {"triple", 3, {}}};
    if (db.depth > 3) modes.push_back({fmt::format("depth {}", db.depth), static_cast<std::size_t>(db.depth), {}});
    for (auto& m : modes) {
      prefetch_pipeline pipe(bytes, m.depth == 0 ? 1 : m.depth);
      std::vector<double> totals;
      std::vector<pipeline_run> runs;
      for (int rep = 0; rep < reps; ++rep) {
        GPU_BASICS_CUDA_TRY(cudaMemset(sums.data(), 0, sums.size()));
        auto run = m.depth == 0 ? pipe.run_serial(sources, compute) : pipe.run(sources, compute);
        std::vector<unsigned long long> got(batches);
        GPU_BASICS_CUDA_TRY(cudaMemcpy(got.data(), sums.data(), sums.size(), cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < batches; ++i)
          if (got[i] != want[i])
            throw verification_error(fmt::format(
                "double-buffering ({}, ratio {}): batch {} checksum {:#x}, expected {:#x}: a buffer "
                "was overwritten before its compute finished", m.name, ratio, i, got[i], want[i]));
        totals.push_back(run.total_s);
        runs.push_back(std::move(run));
      }
      // The timeline shown is the run closest to the median.
      const double med = summarize(totals).median;
      m.run = *std::min_element(runs.begin(), runs.end(), [&](const pipeline_run& a, const pipeline_run& b) {
        return std::abs(a.total_s - med) < std::abs(b.total_s - med);
      });
      m.run.total_s = summarize(totals).median;
    }
    const double n = static_cast<double>(batches);
    const double ideal = ideal_pipeline_seconds(batches, copy_s, compute_s);
    const double serial = modes[0].run.total_s, dbl = modes[1].run.total_s, tpl = modes[2].run.total_s;
    t.add_row({ratio, copy_s, compute_s, serial / n, dbl / n, tpl / n, ideal / n, serial / dbl,
               ideal / dbl, ideal / tpl, std::string(compute_s > copy_s ? "compute" : "copy")});
    nlohmann::json tl;
    tl["compute_to_copy"] = ratio;
    tl["lcg_iterations"] = k;
    for (const auto& m : modes) tl[m.name] = {{"total_s", m.run.total_s}, {"batches", timeline_json(m.run)}};
    timelines.push_back(tl);
    if (std::abs(std::log(ratio)) < closest_to_one) {
      closest_to_one = std::abs(std::log(ratio));
      traced.clear();
      traced_k = k;
      for (const auto& m : modes) traced.emplace_back(fmt::format("{} (compute/copy {})", m.name, ratio), m.run);
    }
  }

  // The trace: one process per mode, a track per stream.
  for (const auto& [name, run] : traced) {
    ++pid;
    trace.name_process(pid, name, static_cast<int>(pid));
    trace.name_thread(pid, 1, "copy stream (H2D)", 1);
    trace.name_thread(pid, 2, "compute stream", 2);
    const bool serial = name.rfind("serial", 0) == 0;
    for (std::size_t i = 0; i < run.batches.size(); ++i) {
      const auto& b = run.batches[i];
      trace.slice(fmt::format("copy batch {}", i), "memcpy", b.copy_start_s * 1e6,
                  (b.copy_end_s - b.copy_start_s) * 1e6, pid, 1, {{"bytes", bytes}, {"batch", i}});
      trace.slice(fmt::format("compute batch {}", i), "kernel", b.compute_start_s * 1e6,
                  (b.compute_end_s - b.compute_start_s) * 1e6, pid, serial ? 1 : 2, {{"batch", i}});
    }
  }
  trace.metadata("source", "gpu-basics transfer: double-buffering timelines from CUDA events");
  const std::string trace_path =
      (std::filesystem::path(ctx.cfg.output.directory) / "double_buffer_trace.json").string();
  trace.write(trace_path);
  spdlog::info("wrote {} (open it in https://ui.perfetto.dev)", trace_path);

  t.notes.push_back(
      "- serial: copy a batch, then compute it, on one stream: each batch costs copy + compute. "
      "double / triple: the copy of the next batch runs on its own stream (and copy engine) while "
      "the current one is computed, so a batch costs about max(copy, compute).");
  t.notes.push_back(
      "- ideal = copy + compute + (batches - 1) x max(copy, compute): the first copy and the last "
      "compute cannot overlap anything. Efficiency = ideal / achieved.");
  t.notes.push_back(
      "- Copy-bound (compute/copy < 1): the copy stream never rests and compute waits for data; "
      "compute-bound (> 1): the copies hide completely. At 1 the gain is largest, ~2x. A third "
      "buffer only helps when copy or compute times vary from batch to batch.");
  t.notes.push_back(fmt::format(
      "- Every batch's checksum matched the CPU's: no buffer was overwritten while in use. The "
      "timelines are in {} (a process per mode, a track per stream).", trace_path));
  r.extra["double_buffer"] = {{"batch_bytes", bytes}, {"batches", batches}, {"copy_s", copy_s},
                              {"trace", trace_path}, {"timelines", timelines}};
  r.tables.push_back(std::move(t));

  // --trace: the double-buffered pipeline at the ratio closest to 1 as CUPTI sees it: real copy
  // and kernel records on their streams. Three runs: the first untraced, the second warms the
  // tracer up, the third is kept; every run's checksums are checked.
  if (auto session = start_trace(ctx, trace_schedule{1, 1, 0})) {
    std::vector<unsigned long long> want(batches), got(batches);
    pool.parallel_for(batches, [&](std::size_t i) {
      want[i] = lcg_checksum_of_pattern(bytes, static_cast<std::uint32_t>(i), traced_k);
    });
    prefetch_pipeline pipe(bytes, 2);
    for (int run = 0; run < 3; ++run) {
      session->step();
      scoped_range range(fmt::format("double-buffered run {} ({} batches)", run, batches));
      GPU_BASICS_CUDA_TRY(cudaMemset(sums.data(), 0, sums.size()));
      (void)pipe.run(sources, [&](stream_view s, const void* dev, std::size_t batch) {
        enqueue_lcg_checksum(dev, bytes, traced_k, sums.as<unsigned long long>() + batch, s);
      });
      GPU_BASICS_CUDA_TRY(cudaMemcpy(got.data(), sums.data(), sums.size(), cudaMemcpyDeviceToHost));
      if (got != want) throw verification_error("double-buffering (traced run): a batch checksum did not match");
    }
    write_trace(ctx, *session, r, nullptr, nullptr);
  }
}

}  // namespace gpu_basics::cli

// The double-buffering part of the transfer lesson, measured: copy batch i+1 while computing
// batch i, for several compute/copy ratios; serial vs double vs triple (vs a deeper ring), every
// batch checksum verified, a Chrome/Perfetto trace of the timelines and, with --trace, the
// pipeline as CUPTI sees it.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/pipeline.hpp"

namespace gpu_basics::lessons {

namespace {

/// The fewest runs of a pipeline mode (and compute-time samples) before one may stop as precise.
constexpr int kPipelineMinRuns = 3;

/// What every ratio shares: the pinned source batches, the checksum slots, the host threads.
struct workload {
  std::size_t bytes;
  std::size_t batches;
  pinned_buffer host;
  std::vector<const void*> sources;
  device_buffer sums;
  thread_pool pool{default_thread_count()};

  workload(std::size_t b, std::size_t n)
      : bytes(b), batches(n), host(b * n), sums(n * sizeof(unsigned long long)) {
    // Pinned source batches, each with its own pattern.
    for (std::size_t i = 0; i < batches; ++i) {
      auto* p = static_cast<std::byte*>(host.data()) + i * bytes;
      pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t len) {
        fill_pattern_host(p + off, len, static_cast<std::uint32_t>(i), off);
      });
      sources.push_back(p);
    }
  }
  [[nodiscard]] unsigned long long* sum(std::size_t batch) {
    return sums.as<unsigned long long>() + batch;
  }
  /// The host reference checksum of every batch for k LCG steps.
  [[nodiscard]] std::vector<unsigned long long> expected(unsigned k) {
    std::vector<unsigned long long> want(batches);
    pool.parallel_for(batches, [&](std::size_t i) {
      want[i] = lcg_checksum_of_pattern(bytes, static_cast<std::uint32_t>(i), k);
    });
    return want;
  }
  [[nodiscard]] std::vector<unsigned long long> checksums() const {
    std::vector<unsigned long long> got(batches);
    GPU_BASICS_CUDA_TRY(cudaMemcpy(got.data(), sums.data(), sums.size(), cudaMemcpyDeviceToHost));
    return got;
  }
};

/// Compute time as a + b x iterations, from two points, so a target time can be hit.
class compute_model {
 public:
  /// `rule` samples each time() (its own warm-up aside: `warmup` runs first, here).
  compute_model(workload& w, int warmup, const stopping_rule& rule)
      : w_(w), probe_(w.bytes), rule_(rule) {
    enqueue_fill_pattern(probe_.data(), w.bytes, 7, side_);
    for (int i = 0; i < std::max(1, warmup); ++i) (void)time(4);
    const unsigned k1 = 16, k2 = 1024;
    const double t1 = time(k1), t2 = time(k2);
    per_iter_ = std::max(1e-12, (t2 - t1) / (k2 - k1));
    base_ = std::max(0.0, t1 - per_iter_ * k1);
  }
  /// Median of the checksum kernel with k steps, sampled by the rule.
  double time(unsigned k) {
    std::vector<double> t;
    cuda_event a, b;
    (void)sample_each(rule_, t, [&] {
      a.record(side_);
      enqueue_lcg_checksum(probe_.data(), w_.bytes, k, w_.sum(0), side_);
      b.record(side_);
      b.synchronize();
      return cuda_event::elapsed_s(a, b);
    });
    return summarize(t).median;
  }
  [[nodiscard]] unsigned iterations_for(double seconds) const {
    return static_cast<unsigned>(std::max(1.0, std::round((seconds - base_) / per_iter_)));
  }

 private:
  workload& w_;
  device_buffer probe_;
  cuda_stream side_;
  stopping_rule rule_;
  double per_iter_ = 0, base_ = 0;
};

std::vector<pipeline_batch> batches_of(const pipeline_run& run) {
  std::vector<pipeline_batch> out;
  out.reserve(run.batches.size());
  for (const auto& b : run.batches)
    out.push_back({b.copy_start_s, b.copy_end_s, b.compute_start_s, b.compute_end_s});
  return out;
}

/// One mode at one ratio: verified runs sampled by `rule`; the median total and the run closest
/// to it.
pipeline_mode_run run_mode(workload& w, std::string name, int depth, unsigned k, double ratio,
                           const stopping_rule& rule, const std::vector<unsigned long long>& want) {
  const auto compute = [&](stream_view s, const void* dev, std::size_t batch) {
    enqueue_lcg_checksum(dev, w.bytes, k, w.sum(batch), s);
  };
  prefetch_pipeline pipe(w.bytes, depth == 0 ? 1 : static_cast<std::size_t>(depth));
  std::vector<double> totals;
  std::vector<pipeline_run> runs;
  const sampling_outcome outcome = sample_each(rule, totals, [&] {
    GPU_BASICS_CUDA_TRY(cudaMemset(w.sums.data(), 0, w.sums.size()));
    auto run = depth == 0 ? pipe.run_serial(w.sources, compute) : pipe.run(w.sources, compute);
    const auto got = w.checksums();
    for (std::size_t i = 0; i < w.batches; ++i)
      if (got[i] != want[i])
        throw verification_error(fmt::format(
            "double-buffering ({}, ratio {}): batch {} checksum {:#x}, expected {:#x}: a buffer "
            "was overwritten before its compute finished",
            name, ratio, i, got[i], want[i]));
    const double total_s = run.total_s;
    runs.push_back(std::move(run));
    return total_s;
  });
  // The timeline kept is the run closest to the median.
  const double med = summarize(totals).median;
  const auto closest =
      std::min_element(runs.begin(), runs.end(), [&](const pipeline_run& a, const pipeline_run& b) {
        return std::abs(a.total_s - med) < std::abs(b.total_s - med);
      });
  return {std::move(name), depth, med, batches_of(*closest), outcome};
}

double_buffer_ratio run_ratio(workload& w, compute_model& model, double copy_s, double ratio,
                              int depth, const stopping_rule& rule) {
  double_buffer_ratio x;
  x.compute_to_copy = ratio;
  const unsigned k = model.iterations_for(ratio * copy_s);
  x.lcg_iterations = k;
  x.compute_s = model.time(k);
  const auto want = w.expected(k);
  std::vector<std::pair<std::string, int>> modes = {{"serial", 0}, {"double", 2}, {"triple", 3}};
  if (depth > 3) modes.emplace_back(fmt::format("depth {}", depth), depth);
  for (const auto& [name, d] : modes) x.modes.push_back(run_mode(w, name, d, k, ratio, rule, want));
  return x;
}

/// The timelines at one ratio: one process per mode, a track per stream.
void write_timelines(const double_buffer_ratio& x, std::uint64_t bytes, const std::string& path) {
  trace_writer trace;
  std::int64_t pid = 0;
  for (const auto& m : x.modes) {
    ++pid;
    trace.name_process(pid, fmt::format("{} (compute/copy {})", m.name, x.compute_to_copy),
                       static_cast<int>(pid));
    trace.name_thread(pid, 1, "copy stream (H2D)", 1);
    trace.name_thread(pid, 2, "compute stream", 2);
    const bool serial = m.depth == 0;
    for (std::size_t i = 0; i < m.batches.size(); ++i) {
      const auto& b = m.batches[i];
      trace.slice(fmt::format("copy batch {}", i), "memcpy", b.copy_start_s * 1e6,
                  (b.copy_end_s - b.copy_start_s) * 1e6, pid, 1, {{"bytes", bytes}, {"batch", i}});
      trace.slice(fmt::format("compute batch {}", i), "kernel", b.compute_start_s * 1e6,
                  (b.compute_end_s - b.compute_start_s) * 1e6, pid, serial ? 1 : 2, {{"batch", i}});
    }
  }
  trace.metadata("source", "gpu-basics transfer: double-buffering timelines from CUDA events");
  trace.write(path);
  spdlog::info("wrote {} (open it in https://ui.perfetto.dev)", path);
}

/// --trace: the double-buffered pipeline at the traced ratio as CUPTI sees it: real copy and
/// kernel records on their streams. Three runs: the first untraced, the second warms the tracer
/// up, the third is kept; every run's checksums are checked.
std::optional<trace_summary> cupti_trace(context& ctx, workload& w, unsigned k) {
  auto session = start_trace(ctx, trace_schedule{1, 1, 0});
  if (!session) return std::nullopt;
  const auto want = w.expected(k);
  prefetch_pipeline pipe(w.bytes, 2);
  for (int run = 0; run < 3; ++run) {
    session->step();
    scoped_range range(fmt::format("double-buffered run {} ({} batches)", run, w.batches));
    GPU_BASICS_CUDA_TRY(cudaMemset(w.sums.data(), 0, w.sums.size()));
    (void)pipe.run(w.sources, [&](stream_view s, const void* dev, std::size_t batch) {
      enqueue_lcg_checksum(dev, w.bytes, k, w.sum(batch), s);
    });
    if (w.checksums() != want)
      throw verification_error("double-buffering (traced run): a batch checksum did not match");
  }
  return write_trace(ctx, *session, nullptr, nullptr);
}

}  // namespace

std::optional<double_buffer_result> measure_double_buffer(context& ctx) {
  const auto& db = ctx.cfg.transfer.double_buffer;
  if (!db.enabled) {
    if (ctx.trace_path)
      spdlog::warn(
          "--trace: transfer traces its double-buffering run, which "
          "transfer.double_buffer.enabled: "
          "false turns off; no trace written");
    return std::nullopt;
  }
  double_buffer_result r;
  r.batch_bytes = db.batch_bytes;
  r.batches = static_cast<std::uint64_t>(db.batches);
  r.depth = db.depth;
  r.repetitions = std::max(3, std::min(ctx.cfg.benchmark.iterations, 7));
  workload w(db.batch_bytes, static_cast<std::size_t>(db.batches));

  // Calibrate: copy time of one batch, and compute time as a + b * iterations.
  copy_bench bench(capped(ctx.cfg.benchmark.rule(), 10));
  r.copy_s = bench.copy(copy_direction::h2d, host_memory::pinned, db.batch_bytes).time_s.median;
  // The rules: each mode's runs at most `repetitions` times, each compute time at most 5 times,
  // under benchmark.*'s rule, without warm-up runs of their own (the model warms up itself).
  // These figures are not compare's gates, and a pipeline's total varies by well under 1% from
  // run to run: each stops after kPipelineMinRuns once its median is known within
  // benchmark.max_noise (half of the lesson's time went to runs that changed nothing).
  stopping_rule runs_rule = without_warmup(capped(ctx.cfg.benchmark.rule(), *r.repetitions));
  runs_rule.min_samples = std::min(runs_rule.min_samples, kPipelineMinRuns);
  stopping_rule compute_rule = without_warmup(capped(ctx.cfg.benchmark.rule(), 5));
  compute_rule.min_samples = std::min(compute_rule.min_samples, kPipelineMinRuns);
  compute_model model(w, 1, compute_rule);

  const int total = static_cast<int>(db.compute_to_copy.size());
  for (int i = 0; i < total; ++i) {
    const double ratio = db.compute_to_copy[static_cast<std::size_t>(i)];
    ctx.report_progress(fmt::format("double-buffering, compute/copy {}", ratio), i, total);
    r.ratios.push_back(run_ratio(w, model, r.copy_s, ratio, db.depth, runs_rule));
  }
  ctx.report_progress("double-buffering", total, total);

  // The ratio closest to 1 is the one traced (there the overlap shows best).
  const double_buffer_ratio* traced = nullptr;
  for (const auto& x : r.ratios)
    if (!traced ||
        std::abs(std::log(x.compute_to_copy)) < std::abs(std::log(traced->compute_to_copy)))
      traced = &x;
  if (traced) {
    const std::string path =
        (std::filesystem::path(ctx.cfg.output.directory) / "double_buffer_trace.json").string();
    write_timelines(*traced, r.batch_bytes, path);
    r.timeline_trace_path = path;
    r.timeline_trace_ratio = traced->compute_to_copy;
    r.trace = cupti_trace(ctx, w, static_cast<unsigned>(traced->lcg_iterations.value_or(1)));
  }
  return r;
}

}  // namespace gpu_basics::lessons

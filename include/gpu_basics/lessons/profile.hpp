// `gpu-basics profile`: why CUDA events, key averages of a small workload, cuBLASLt matmul
// against the datasheet peak, and NVML utilization, power and clocks sampled under that load
// (with the energy used and the sampler's own CPU cost), and the lesson's --trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/trace_output.hpp"
#include "gpu_basics/profiler/sampler.hpp"

namespace gpu_basics::lessons {

/// One kernel (LCG steps over a buffer) timed three ways. From a schema-1 table alone only the
/// medians are known (count 0).
struct timing_methods_result {
  std::optional<std::uint64_t> bytes;        // the buffer the kernel reads
  std::optional<unsigned> lcg_iterations;    // LCG steps per 32-bit word; nullopt from schema 1
  std::optional<int> warmup;                 // untimed launches first
  std::optional<int> iterations;             // timed launches per method
  summary host_no_sync_s;                    // host clock around the launch only
  summary host_sync_s;                       // host clock around launch + cudaStreamSynchronize
  summary events_s;                          // CUDA events around the kernel
  std::optional<sampling_outcome> sampling;  // of the events' times; absent before the rule

  bool operator==(const timing_methods_result&) const = default;
};
GPU_BASICS_JSON(timing_methods_result, bytes, lcg_iterations, warmup, iterations, host_no_sync_s,
                host_sync_s, events_s, sampling)

/// One named region of the key-averages workload (as timing_registry aggregates it).
struct region_timing {
  std::string name;
  std::uint64_t calls = 0;
  double gpu_total_s = 0;
  double gpu_min_s = 0;
  double gpu_max_s = 0;
  double host_total_s = 0;  // CPU time spent issuing the region, over all calls

  bool operator==(const region_timing&) const = default;
};
GPU_BASICS_JSON(region_timing, name, calls, gpu_total_s, gpu_min_s, gpu_max_s, host_total_s)

/// Steps of H2D copy, kernel, D2H copy over pinned memory; regions by total GPU time, largest
/// first.
struct key_averages_result {
  std::optional<std::uint64_t> bytes;      // per copy and per kernel; nullopt from schema 1
  std::optional<unsigned> lcg_iterations;  // of the kernel
  std::optional<int> steps;
  std::vector<region_timing> regions;

  bool operator==(const key_averages_result&) const = default;
};
GPU_BASICS_JSON(key_averages_result, bytes, lcg_iterations, steps, regions)

/// One precision at one shape. Times in seconds from the start of sampling (see profile_result).
struct matmul_run {
  std::string precision;  // "fp16", "bf16", "tf32", "fp32"
  std::uint64_t m = 0, n = 0, k = 0;
  int candidates = 0;                        // algorithms the heuristic offered
  int chosen = -1;                           // index of the fastest
  std::vector<double> candidate_median_s;    // empty from a schema-1 table alone
  std::vector<double> seconds;               // timed runs of the chosen algorithm
  summary flops_per_s;                       // from a table alone: median, min, max (count 0)
  std::optional<double> peak_flops_per_s;    // datasheet, dense; nullopt for an unknown GPU
  double check_error = 0;                    // max relative error of the small check
  std::optional<double> start_s;             // the run (autotune, warm-up, timed runs) began
  std::optional<double> end_s;               // and ended; nullopt from schema 1
  std::optional<sampling_outcome> sampling;  // absent in results written before the rule

  bool operator==(const matmul_run&) const = default;
};
GPU_BASICS_JSON(matmul_run, precision, m, n, k, candidates, chosen, candidate_median_s, seconds,
                flops_per_s, peak_flops_per_s, check_error, start_s, end_s, sampling)

struct matmul_result {
  std::optional<int> max_candidates;             // how many algorithms the heuristic is asked for
  std::optional<std::uint64_t> check_size;       // n of the n^3 check against the CPU
  std::optional<std::uint64_t> workspace_bytes;  // cuBLASLt workspace
  std::optional<int> warmup;
  std::optional<int> iterations;
  std::vector<matmul_run> runs;  // shapes outer, precisions inner

  bool operator==(const matmul_result&) const = default;
};
GPU_BASICS_JSON(matmul_result, max_candidates, check_size, workspace_bytes, warmup, iterations,
                runs)

/// One metric's summary over the samples (a row of the "nvml" table). Values in the metric's
/// unit (memory in bytes); nullopt when no sample had a value.
struct nvml_metric_row {
  std::string metric;         // metric_name(): "power_w"
  std::string status;         // "ok", "not_supported", ...
  std::uint64_t samples = 0;  // samples with a value (0 from schema 1)
  std::optional<double> mean, min, max, p50, p95;

  bool operator==(const nvml_metric_row&) const = default;
};
GPU_BASICS_JSON(nvml_metric_row, metric, status, samples, mean, min, max, p50, p95)

/// The sampler thread's own cost.
struct sampler_cost {
  double cpu_s = 0;       // CPU time of the sampler thread
  double wall_s = 0;      // wall time it ran
  double slow_cpu_s = 0;  // of cpu_s: the samples that also read the slow metrics (energy)
  std::uint64_t slow_samples = 0;
  std::uint64_t samples_taken = 0;  // every sample, kept or dropped from the ring
  /// Share of a core (a fraction) of a bare thread that slept to the same deadlines beside the
  /// sampler and did nothing else (wake_floor): the OS's cost of waking it (absent in older
  /// results).
  std::optional<double> wake_floor_fraction;

  bool operator==(const sampler_cost&) const = default;
};
GPU_BASICS_JSON(sampler_cost, cpu_s, wall_s, slow_cpu_s, slow_samples, samples_taken,
                wake_floor_fraction)

/// One NVML call's cost while the sampler ran (a row of the "nvml_cost" table).
struct nvml_call_row {
  std::string call;                  // "nvmlDeviceGetUtilizationRates"
  std::vector<std::string> metrics;  // metric_name()s it fills
  std::string cadence;               // "fast", "medium", "averaged", "slow"
  int interval_ms = 0;               // how often the sampler made it
  std::uint64_t calls = 0;
  std::uint64_t timed = 0;  // of the calls, timed
  double cpu_us = 0;        // mean CPU per timed call
  /// Median time between changes of its first metric's value over the samples (nullopt with
  /// fewer than two changes).
  std::optional<double> changed_every_ms;

  bool operator==(const nvml_call_row&) const = default;
};
GPU_BASICS_JSON(nvml_call_row, call, metrics, cadence, interval_ms, calls, timed, cpu_us,
                changed_every_ms)

/// One metric over time, for a chart: seconds from the start of sampling and values, only where
/// the sample had a value; decimated (evenly spaced picks, first and last kept) to at most
/// kMaxSeriesPoints.
struct sample_series {
  std::string metric;  // "gpu_util_percent", "power_w", "sm_clock_mhz", "temperature_c"
  std::vector<double> time_s;
  std::vector<double> values;
  std::uint64_t source_points = 0;  // points before decimation

  bool operator==(const sample_series&) const = default;
};
GPU_BASICS_JSON(sample_series, metric, time_s, values, source_points)

inline constexpr std::size_t kMaxSeriesPoints = 1000;
/// The metrics kept as series.
inline constexpr const char* kSeriesMetrics[] = {"gpu_util_percent", "power_w", "sm_clock_mhz",
                                                 "temperature_c"};

/// What NVML saw during the matmuls.
struct nvml_sampling {
  int interval_ms = 0;
  std::optional<int> slow_interval_ms;      // the energy counter's period
  std::optional<int> medium_interval_ms;    // utilization, memory, temperature, clocks, reasons
  std::optional<int> averaged_interval_ms;  // power (profiler.power_interval_ms, as used)
  std::uint64_t samples = 0;                // kept
  std::uint64_t dropped = 0;                // dropped from the ring (oldest first)
  std::vector<nvml_metric_row> metrics;
  std::string energy_status = "unavailable";  // of the energy counter
  std::optional<double> energy_j;             // between the first and last counter reads
  std::optional<double> energy_s;
  std::optional<sampler_cost> cost;
  std::vector<nvml_call_row> calls;             // each NVML call's cost (empty in older results)
  std::optional<std::string> samples_csv_path;  // <output.directory>/profile_samples.csv
  std::vector<sample_series> series;

  bool operator==(const nvml_sampling&) const = default;
};
GPU_BASICS_JSON(nvml_sampling, interval_ms, slow_interval_ms, medium_interval_ms,
                averaged_interval_ms, samples, dropped, metrics, energy_status, energy_j, energy_s,
                cost, calls, samples_csv_path, series)

/// The median time between changes of `metric`'s value over `samples`, in ms (only samples that
/// read it count); nullopt with fewer than two changes.
[[nodiscard]] std::optional<double> changed_every_ms(const std::vector<gpu_sample>& samples,
                                                     gpu_metric metric);

/// The lesson's result. Times of the matmul runs and of the series share one origin: the host
/// clock read just before sampling started (or before the matmuls, without NVML).
struct profile_result {
  timing_methods_result timing;
  key_averages_result key_averages;
  matmul_result matmul;
  std::string nvml_status = "ok";      // "ok" or why there are no samples
  std::optional<nvml_sampling> nvml;   // nullopt without NVML
  std::optional<trace_summary> trace;  // --trace

  bool operator==(const profile_result&) const = default;
};
GPU_BASICS_JSON(profile_result, timing, key_averages, matmul, nvml_status, nvml, trace)

/// Notes of "timing_methods", "key_averages", "matmul" (peaks from facts.datasheet), "nvml"
/// (energy, sampler cost) and "trace".
[[nodiscard]] std::vector<note> explain_profile(const profile_result& r, const device_facts& facts);
/// "timing_methods", "key_averages", "matmul", "nvml", then "trace" when traced.
[[nodiscard]] std::vector<presentation::table> present_profile(const profile_result& r);
/// From a schema-1 block: the four tables (five with --trace) and extra.matmul, extra.nvml_samples,
/// extra.trace where present.
/// @throws json_path_error (a format_error) naming the key path in the block of what cannot be
/// read.
[[nodiscard]] profile_result profile_from_v1(const nlohmann::json& block);

/// The series of kSeriesMetrics from samples, times relative to `origin_s` (host_seconds()).
[[nodiscard]] std::vector<sample_series> series_of(const std::vector<gpu_sample>& samples,
                                                   double origin_s,
                                                   std::size_t max_points = kMaxSeriesPoints);
/// Evenly spaced picks of (time, value), first and last kept, at most max_points (>= 2).
/// @throws format_error when the series' times and values differ in length.
[[nodiscard]] sample_series decimate(sample_series s, std::size_t max_points = kMaxSeriesPoints);

/// The registry's entry.
[[nodiscard]] lesson profile_lesson();

}  // namespace gpu_basics::lessons

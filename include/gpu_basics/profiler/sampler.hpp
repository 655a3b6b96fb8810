// GPU metric sampling: a source of readings (NVML, or a fake in tests), and a background
// sampler thread at a fixed interval into a bounded ring, with per-metric summaries and its
// own CPU cost. Host-only: the NVML source loads the library at run time.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/core/stats.hpp"

namespace gpu_basics {

/// The metrics a sample holds, in a fixed order (names are JSON/CSV keys with their units).
enum class gpu_metric : std::size_t {
  gpu_util_percent,
  memory_util_percent,
  memory_used_bytes,
  memory_total_bytes,
  power_w,
  energy_j,
  temperature_c,
  sm_clock_mhz,
  memory_clock_mhz,
  pcie_tx_bytes_per_s,
  pcie_rx_bytes_per_s,
  clock_event_reasons,
  count_
};
inline constexpr std::size_t kGpuMetricCount = static_cast<std::size_t>(gpu_metric::count_);
/// The metric's key, with its unit: "gpu_util_percent", "power_w", ...
[[nodiscard]] std::string_view metric_name(gpu_metric m) noexcept;

struct gpu_sample {
  double time_s = 0;  // host_seconds() (clock.hpp)
  std::array<reading<double>, kGpuMetricCount> values{};
  /// The reading of metric `m`.
  [[nodiscard]] const reading<double>& operator[](gpu_metric m) const {
    return values[static_cast<std::size_t>(m)];
  }
  /// The reading of metric `m`, to set.
  reading<double>& operator[](gpu_metric m) { return values[static_cast<std::size_t>(m)]; }
};

/// How often the sampler reads a metric. Each NVML call costs tens of microseconds of CPU (the
/// profile lesson's "nvml_cost" table measures them), and most values change far less often
/// than a 10 ms sampler looks, so each metric is read about as often as it moves:
/// - fast: every sample: the SM clock (a 2 us call; it moves within milliseconds under power
///   or thermal capping);
/// - medium: at most every medium interval (200 ms by default): utilization (NVML refreshes it
///   about every 200 ms on an H200: 19 reads in 20 at 10 ms repeated the last), memory used and
///   total, temperature, the memory clock and the clock-event reasons;
/// - averaged: at most every averaged interval (500 ms by default), for a costly reading that
///   the driver smooths itself: power (270-620 us per call on an H200; NVML's docs: on Ampere
///   and newer, GA100 aside, the reading is the average over the last second, so reads closer
///   together than that overlap mostly);
/// - slow: at most every slow interval, for what costs milliseconds per reading: the energy
///   counter and PCIe throughput.
enum class metric_cadence { fast, medium, averaged, slow };
[[nodiscard]] metric_cadence cadence_of(gpu_metric m) noexcept;
/// "fast", "medium", "averaged", "slow".
[[nodiscard]] std::string_view to_string(metric_cadence c) noexcept;
/// cadence_of(m) == metric_cadence::slow.
[[nodiscard]] bool is_slow_metric(gpu_metric m) noexcept;

/// What one source call (an NVML entry point) cost over a run. Not every call is timed: timing
/// one costs two clock reads, so a source times every few calls and counts all of them.
struct call_cost {
  std::string call;                 // "nvmlDeviceGetUtilizationRates"
  std::vector<gpu_metric> metrics;  // what it fills
  metric_cadence cadence = metric_cadence::fast;
  std::uint64_t calls = 0;  // calls made
  std::uint64_t timed = 0;  // of those, timed
  double timed_cpu_s = 0;   // CPU time of the timed calls (the calling thread's)
  /// Mean CPU seconds per timed call (0 when none was timed).
  [[nodiscard]] double cpu_each_s() const noexcept {
    return timed ? timed_cpu_s / static_cast<double>(timed) : 0.0;
  }
};

class metric_source {
 public:
  virtual ~metric_source() = default;
  /// One sample of the metrics whose cadence is `deepest` or more frequent; the others are left
  /// `unavailable` (not read): the sampler asks for them at lower rates.
  [[nodiscard]] virtual gpu_sample read(metric_cadence deepest) = 0;
  /// Each call's cost so far, in the order the source makes them (empty where not measured).
  [[nodiscard]] virtual std::vector<call_cost> call_costs() const { return {}; }
};

/// Reads one device through NVML (by PCI bus id, as the CUDA runtime names it).
/// Costs measured on the H200 (driver 580) while it ran matmuls, CPU per call: SM and memory
/// clocks 1.5-10 us; temperature 3-75 us; memory info 29-34 us; utilization 38-99 us;
/// clock-event reasons 65-68 us; power 270-355 us; the energy counter 2.6-8.8 ms (a slow
/// metric). One call can fill several metrics (utilization: GPU and memory; memory: used and
/// total). PCIe throughput is opt-in and slow as well: NVML measures each direction over a
/// 20 ms window inside the call.
class nvml_metric_source final : public metric_source {
 public:
  /// Reads `device` through `nv`; pcie_throughput adds the PCIe tx/rx metrics (slow reads).
  /// @throws logic_error when nv is null.
  nvml_metric_source(std::shared_ptr<nvml> nv, nvml_device device, bool pcie_throughput = false);
  /// One sample; a metric NVML cannot give keeps its status.
  gpu_sample read(metric_cadence deepest) override;
  /// Each NVML call's cost (thread CPU time): every kTimeEvery-th call of the fast cadence and
  /// every call of the others is timed, each one's first call excepted (one-off costs).
  [[nodiscard]] std::vector<call_cost> call_costs() const override;
  static constexpr std::uint64_t kTimeEvery = 4;

 private:
  struct probe {
    call_cost cost;
    std::function<void(gpu_sample&)> fill;
  };
  std::shared_ptr<nvml> nv_;
  nvml_device dev_;
  bool pcie_;
  mutable std::mutex mutex_;  // guards probes_' costs (read on the sampler thread, costs after)
  std::vector<probe> probes_;
};

/// Test double: returns what `script` computes for the n-th read, with the metrics of a cadence
/// the read does not include left `unavailable`, as a real source does.
class fake_metric_source final : public metric_source {
 public:
  /// `script(n)` gives the sample of read n (0-based).
  explicit fake_metric_source(std::function<gpu_sample(std::size_t)> script)
      : script_(std::move(script)) {}
  /// The script's next sample; what the script throws passes through.
  gpu_sample read(metric_cadence deepest) override;
  /// Reads so far.
  [[nodiscard]] std::size_t reads() const noexcept { return reads_; }
  /// Reads so far that included the medium-cadence metrics (averaged and slow reads among them).
  [[nodiscard]] std::size_t medium_reads() const noexcept { return medium_reads_; }
  /// Reads so far that included the averaged metrics (slow reads among them).
  [[nodiscard]] std::size_t averaged_reads() const noexcept { return averaged_reads_; }
  /// Reads so far that included the slow metrics.
  [[nodiscard]] std::size_t slow_reads() const noexcept { return slow_reads_; }
  /// What call_costs() returns.
  void set_call_costs(std::vector<call_cost> c) { costs_ = std::move(c); }
  [[nodiscard]] std::vector<call_cost> call_costs() const override { return costs_; }

 private:
  std::vector<call_cost> costs_;
  std::function<gpu_sample(std::size_t)> script_;
  std::atomic<std::size_t> reads_{0}, medium_reads_{0}, averaged_reads_{0}, slow_reads_{0};
};

struct metric_summary {
  gpu_metric metric;
  metric_status status = metric_status::unavailable;  // ok if any sample had a value
  std::size_t samples = 0;                            // samples with a value
  double mean = 0, min = 0, max = 0, p50 = 0, p95 = 0;
};

/// Summaries of every metric over samples (statuses from the first sample without a value
/// where none had one).
[[nodiscard]] std::vector<metric_summary> summarize_samples(const std::vector<gpu_sample>& samples);

/// Energy used over a stretch of samples, and the mean power it implies.
struct energy_use {
  metric_status status = metric_status::unavailable;
  double joules = 0, seconds = 0;
  /// joules / seconds; 0 when no time passed.
  [[nodiscard]] double mean_watts() const noexcept { return seconds > 0 ? joules / seconds : 0.0; }
};
/// Energy used between the first and last samples that read the energy counter (a slow metric,
/// so the sampler reads it on its first and last samples); unavailable with fewer than two.
[[nodiscard]] energy_use energy_between(const std::vector<gpu_sample>& samples);

/// Samples a source on its own thread every interval_ms. Medium, averaged and slow metrics
/// (metric_cadence) are read on the first sample, then at most every medium_interval_ms,
/// averaged_interval_ms and slow_interval_ms, and on a last sample taken by stop(), so a 100 Hz
/// sampler stays well under 1% of a core while counters such as energy still span the run (the
/// energy used comes from the first and last readings; those between only draw its curve).
class sampler {
 public:
  /// interval_ms in 1..1000, slow_interval_ms in interval_ms..60000, medium_interval_ms and
  /// averaged_interval_ms in 1..60000 (used within interval_ms..slow_interval_ms, the averaged
  /// one no shorter than the medium one); at most `capacity` samples kept (oldest dropped
  /// first).
  /// @throws logic_error when source is null or a bound is out of range.
  static constexpr std::size_t kCapacity = 100000;
  static constexpr int kSlowIntervalMs = 10000, kMediumIntervalMs = 200, kAveragedIntervalMs = 500;
  sampler(std::shared_ptr<metric_source> source, int interval_ms, std::size_t capacity = kCapacity,
          int slow_interval_ms = kSlowIntervalMs, int medium_interval_ms = kMediumIntervalMs,
          int averaged_interval_ms = kAveragedIntervalMs);
  /// Stops the thread (stop()).
  ~sampler();
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  /// Starts the sampling thread; nothing while it runs.
  void start();
  /// Takes the last sample (slow metrics included) and joins the thread; nothing when stopped.
  void stop();
  /// The samples kept, oldest first.
  [[nodiscard]] std::vector<gpu_sample> samples() const;
  /// Samples dropped from the full ring.
  [[nodiscard]] std::size_t dropped() const noexcept { return dropped_.load(); }
  /// CPU time the sampler thread used (set when it stops).
  [[nodiscard]] double cpu_seconds() const noexcept { return cpu_s_.load(); }
  /// Wall time the sampler thread ran (set when it stops).
  [[nodiscard]] double wall_seconds() const noexcept { return wall_s_.load(); }
  /// Of cpu_seconds(): the samples that read the slow metrics.
  [[nodiscard]] double slow_cpu_seconds() const noexcept { return slow_cpu_s_.load(); }
  /// How many samples read the slow metrics.
  [[nodiscard]] std::size_t slow_samples() const noexcept { return slow_samples_.load(); }
  /// The share of a core the sampler takes once running, apart from its fixed costs at the ends:
  /// a plain sample's CPU per interval plus a slow sample's CPU per slow interval (0 before a
  /// run with both kinds of samples).
  [[nodiscard]] double steady_cpu_fraction() const;
  /// The slow metrics' interval, as given.
  [[nodiscard]] int slow_interval_ms() const noexcept { return slow_interval_ms_; }
  /// The medium metrics' interval, as used (within interval..slow interval).
  [[nodiscard]] int medium_interval_ms() const noexcept { return medium_interval_ms_; }
  /// The averaged metrics' interval, as used (within medium interval..slow interval).
  [[nodiscard]] int averaged_interval_ms() const noexcept { return averaged_interval_ms_; }
  /// The interval of a cadence: the sample interval, the medium, averaged or slow interval.
  [[nodiscard]] int interval_ms_of(metric_cadence c) const noexcept {
    switch (c) {
      case metric_cadence::slow:
        return slow_interval_ms_;
      case metric_cadence::averaged:
        return averaged_interval_ms_;
      case metric_cadence::medium:
        return medium_interval_ms_;
      case metric_cadence::fast:
        break;
    }
    return interval_ms_;
  }
  /// The source's call costs (source().call_costs()); read them once the sampler stopped.
  [[nodiscard]] const metric_source& source() const noexcept { return *source_; }

 private:
  void loop();
  void push(gpu_sample s);
  std::shared_ptr<metric_source> source_;
  int interval_ms_;
  std::size_t capacity_;
  int slow_interval_ms_;
  int medium_interval_ms_;
  int averaged_interval_ms_;
  mutable std::mutex mutex_;
  std::deque<gpu_sample> ring_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<std::size_t> dropped_{0};
  std::atomic<double> cpu_s_{0}, wall_s_{0}, slow_cpu_s_{0};
  std::atomic<std::size_t> slow_samples_{0};
};

/// A thread that only sleeps to absolute deadlines every interval and wakes, as the sampler's
/// loop does (one clock read a wake-up; after falling behind, the next deadline is a whole
/// interval away): what waking alone costs on this machine, the floor under any sampler at that
/// interval (run beside the sampler, it sees the same load).
class wake_floor {
 public:
  /// interval_ms in 1..1000.
  /// @throws logic_error when it is out of range.
  explicit wake_floor(int interval_ms);
  /// Stops the thread (stop()).
  ~wake_floor();
  wake_floor(const wake_floor&) = delete;
  wake_floor& operator=(const wake_floor&) = delete;

  /// Starts the thread; nothing while it runs.
  void start();
  /// Joins the thread (after at most one interval); nothing when stopped.
  void stop();
  /// CPU time the thread used, wall time it ran, and its wake-ups (set when it stops).
  [[nodiscard]] double cpu_seconds() const noexcept { return cpu_s_.load(); }
  [[nodiscard]] double wall_seconds() const noexcept { return wall_s_.load(); }
  [[nodiscard]] std::size_t wakes() const noexcept { return wakes_.load(); }

 private:
  int interval_ms_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<double> cpu_s_{0}, wall_s_{0};
  std::atomic<std::size_t> wakes_{0};
};

/// CSV: time_s and one column per metric; empty where there was no value.
[[nodiscard]] std::string samples_csv(const std::vector<gpu_sample>& samples);
/// JSON: {"metrics": [names], "samples": [{"time_s", name: value|null}...]}
[[nodiscard]] nlohmann::json samples_json(const std::vector<gpu_sample>& samples);
/// JSON of one metric's summary: statistics null unless the status is ok.
void to_json(nlohmann::json& j, const metric_summary& s);

}  // namespace gpu_basics

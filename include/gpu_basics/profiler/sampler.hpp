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

#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/profiler/nvml.hpp"

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
[[nodiscard]] std::string_view metric_name(gpu_metric m) noexcept;

struct gpu_sample {
  double time_s = 0;  // steady clock
  std::array<reading<double>, kGpuMetricCount> values{};
  [[nodiscard]] const reading<double>& operator[](gpu_metric m) const {
    return values[static_cast<std::size_t>(m)];
  }
  reading<double>& operator[](gpu_metric m) { return values[static_cast<std::size_t>(m)]; }
};

class metric_source {
 public:
  virtual ~metric_source() = default;
  [[nodiscard]] virtual gpu_sample read() = 0;
};

/// Reads one device through NVML (by PCI bus id, as the CUDA runtime names it).
/// PCIe throughput is opt-in: NVML measures each direction over a 20 ms window inside the call,
/// so a sample with it took ~46 ms on the H200 (and most of a core), too slow for 100 Hz.
class nvml_metric_source final : public metric_source {
 public:
  nvml_metric_source(std::shared_ptr<nvml> nv, nvml_device device, bool pcie_throughput = false);
  gpu_sample read() override;

 private:
  std::shared_ptr<nvml> nv_;
  nvml_device dev_;
  bool pcie_;
};

/// Test double: returns what `script` computes for the n-th read.
class fake_metric_source final : public metric_source {
 public:
  explicit fake_metric_source(std::function<gpu_sample(std::size_t)> script) : script_(std::move(script)) {}
  gpu_sample read() override { return script_(reads_++); }
  [[nodiscard]] std::size_t reads() const noexcept { return reads_; }

 private:
  std::function<gpu_sample(std::size_t)> script_;
  std::atomic<std::size_t> reads_{0};
};

struct metric_summary {
  gpu_metric metric;
  metric_status status = metric_status::unavailable;  // ok if any sample had a value
  std::size_t samples = 0;                             // samples with a value
  double mean = 0, min = 0, max = 0, p50 = 0, p95 = 0;
};

/// Summaries of every metric over samples (statuses from the first sample without a value
/// where none had one).
[[nodiscard]] std::vector<metric_summary> summarize_samples(const std::vector<gpu_sample>& samples);

class sampler {
 public:
  /// interval_ms in 1..1000; at most `capacity` samples kept (oldest dropped first).
  sampler(std::shared_ptr<metric_source> source, int interval_ms, std::size_t capacity = 100000);
  ~sampler();
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  void start();
  void stop();
  [[nodiscard]] std::vector<gpu_sample> samples() const;
  [[nodiscard]] std::size_t dropped() const noexcept { return dropped_.load(); }
  /// CPU time the sampler thread used, and the wall time it ran.
  [[nodiscard]] double cpu_seconds() const noexcept { return cpu_s_.load(); }
  [[nodiscard]] double wall_seconds() const noexcept { return wall_s_.load(); }

 private:
  void loop();
  std::shared_ptr<metric_source> source_;
  int interval_ms_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<gpu_sample> ring_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<std::size_t> dropped_{0};
  std::atomic<double> cpu_s_{0}, wall_s_{0};
};

/// CSV: time_s and one column per metric; empty where there was no value.
[[nodiscard]] std::string samples_csv(const std::vector<gpu_sample>& samples);
/// JSON: {"metrics": [names], "samples": [{"time_s", name: value|null}...]}
[[nodiscard]] nlohmann::json samples_json(const std::vector<gpu_sample>& samples);
void to_json(nlohmann::json& j, const metric_summary& s);

}  // namespace gpu_basics

#include "gpu_basics/profiler/sampler.hpp"

#include <time.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

std::string_view metric_name(gpu_metric m) noexcept {
  switch (m) {
    case gpu_metric::gpu_util_percent:
      return "gpu_util_percent";
    case gpu_metric::memory_util_percent:
      return "memory_util_percent";
    case gpu_metric::memory_used_bytes:
      return "memory_used_bytes";
    case gpu_metric::memory_total_bytes:
      return "memory_total_bytes";
    case gpu_metric::power_w:
      return "power_w";
    case gpu_metric::energy_j:
      return "energy_j";
    case gpu_metric::temperature_c:
      return "temperature_c";
    case gpu_metric::sm_clock_mhz:
      return "sm_clock_mhz";
    case gpu_metric::memory_clock_mhz:
      return "memory_clock_mhz";
    case gpu_metric::pcie_tx_bytes_per_s:
      return "pcie_tx_bytes_per_s";
    case gpu_metric::pcie_rx_bytes_per_s:
      return "pcie_rx_bytes_per_s";
    case gpu_metric::clock_event_reasons:
      return "clock_event_reasons";
    case gpu_metric::count_:
      break;
  }
  return "?";
}

namespace {
// One absolute sleep on the monotonic clock (steady_clock's), without the clock reads that
// std::this_thread::sleep_until adds around it; restarted when a signal interrupts it.
void sleep_until_monotonic(std::chrono::steady_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(ns.count() % 1000000000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The next deadline a period on; a loop that fell behind waits a whole period rather than
// bursting to catch up.
std::chrono::steady_clock::time_point next_deadline(std::chrono::steady_clock::time_point next,
                                                    std::chrono::steady_clock::time_point now,
                                                    std::chrono::milliseconds period) {
  next += period;
  return next < now ? now + period : next;
}

// Starts `body` on `t` unless `running` already says it runs; a thread that fails to start
// leaves `running` false, so a later call tries again.
template <class F>
void start_once(std::atomic<bool>& running, std::thread& t, F body) {
  if (running.exchange(true)) return;
  try {
    t = std::thread(std::move(body));
  } catch (...) {
    running = false;
    throw;
  }
}

// Tells the loop to end and joins it; nothing when it is not running.
void stop_once(std::atomic<bool>& running, std::thread& t) {
  if (!running.exchange(false)) return;
  if (t.joinable()) t.join();
}
template <class T>
reading<double> as_double(const reading<T>& r, double scale = 1.0) {
  return {r.status, r.ok() ? static_cast<double>(r.value) * scale : 0.0};
}
}  // namespace

nvml_metric_source::nvml_metric_source(std::shared_ptr<nvml> nv, nvml_device device,
                                       bool pcie_throughput)
    : nv_(std::move(nv)), dev_(device), pcie_(pcie_throughput) {
  GPU_BASICS_EXPECTS(nv_ != nullptr, "an NVML source needs NVML");
  using m = gpu_metric;
  const auto add = [&](const char* call, std::vector<gpu_metric> metrics, auto fill) {
    call_cost c;
    c.call = call;
    c.cadence = cadence_of(metrics.front());
    c.metrics = std::move(metrics);
    probes_.push_back({std::move(c), std::move(fill)});
  };
  // In the order of a read; each call fills the metrics it names.
  add("nvmlDeviceGetUtilizationRates", {m::gpu_util_percent, m::memory_util_percent},
      [this](gpu_sample& s) {
        const auto u = nv_->utilization(dev_);
        s[m::gpu_util_percent] = {u.status, static_cast<double>(u.value.gpu_percent)};
        s[m::memory_util_percent] = {u.status, static_cast<double>(u.value.memory_percent)};
      });
  add("nvmlDeviceGetMemoryInfo", {m::memory_used_bytes, m::memory_total_bytes},
      [this](gpu_sample& s) {
        const auto r = nv_->memory(dev_);
        s[m::memory_used_bytes] = {r.status, static_cast<double>(r.value.used_bytes)};
        s[m::memory_total_bytes] = {r.status, static_cast<double>(r.value.total_bytes)};
      });
  add("nvmlDeviceGetClockInfo (SM)", {m::sm_clock_mhz}, [this](gpu_sample& s) {
    s[m::sm_clock_mhz] = as_double(nv_->clock_mhz(dev_, nvml_clock::sm));
  });
  add("nvmlDeviceGetPowerUsage", {m::power_w},
      [this](gpu_sample& s) { s[m::power_w] = as_double(nv_->power_usage_mw(dev_), 1e-3); });
  add("nvmlDeviceGetTemperature", {m::temperature_c},
      [this](gpu_sample& s) { s[m::temperature_c] = as_double(nv_->temperature_c(dev_)); });
  add("nvmlDeviceGetClockInfo (memory)", {m::memory_clock_mhz}, [this](gpu_sample& s) {
    s[m::memory_clock_mhz] = as_double(nv_->clock_mhz(dev_, nvml_clock::memory));
  });
  add("nvmlDeviceGetCurrentClocksEventReasons", {m::clock_event_reasons}, [this](gpu_sample& s) {
    s[m::clock_event_reasons] = as_double(nv_->clock_event_reasons(dev_));
  });
  add("nvmlDeviceGetTotalEnergyConsumption", {m::energy_j},
      [this](gpu_sample& s) { s[m::energy_j] = as_double(nv_->energy_mj(dev_), 1e-3); });
  if (pcie_) {
    add("nvmlDeviceGetPcieThroughput (tx)", {m::pcie_tx_bytes_per_s}, [this](gpu_sample& s) {
      s[m::pcie_tx_bytes_per_s] = as_double(nv_->pcie_tx_kbps(dev_), 1024.0);
    });
    add("nvmlDeviceGetPcieThroughput (rx)", {m::pcie_rx_bytes_per_s}, [this](gpu_sample& s) {
      s[m::pcie_rx_bytes_per_s] = as_double(nv_->pcie_rx_kbps(dev_), 1024.0);
    });
  }
}

metric_cadence cadence_of(gpu_metric m) noexcept {
  switch (m) {
    case gpu_metric::energy_j:
    case gpu_metric::pcie_tx_bytes_per_s:
    case gpu_metric::pcie_rx_bytes_per_s:
      return metric_cadence::slow;
    case gpu_metric::power_w:
      return metric_cadence::averaged;
    case gpu_metric::sm_clock_mhz:
      return metric_cadence::fast;
    default:
      return metric_cadence::medium;
  }
}

std::string_view to_string(metric_cadence c) noexcept {
  switch (c) {
    case metric_cadence::fast:
      return "fast";
    case metric_cadence::medium:
      return "medium";
    case metric_cadence::averaged:
      return "averaged";
    case metric_cadence::slow:
      return "slow";
  }
  return "?";
}

bool is_slow_metric(gpu_metric m) noexcept {
  return cadence_of(m) == metric_cadence::slow;
}

gpu_sample fake_metric_source::read(metric_cadence deepest) {
  gpu_sample s = script_(reads_++);
  if (deepest >= metric_cadence::medium) ++medium_reads_;
  if (deepest >= metric_cadence::averaged) ++averaged_reads_;
  if (deepest == metric_cadence::slow) ++slow_reads_;
  for (std::size_t k = 0; k < kGpuMetricCount; ++k)
    if (cadence_of(static_cast<gpu_metric>(k)) > deepest) s.values[k] = {};
  return s;
}

gpu_sample nvml_metric_source::read(metric_cadence deepest) {
  // Metrics of a cadence not read this time are left `unavailable`.
  gpu_sample s;
  s.time_s = host_seconds();
  std::lock_guard lock(mutex_);
  for (auto& p : probes_) {
    if (p.cost.cadence > deepest) continue;
    // The first call of each is not timed: it pays NVML's one-off costs in this thread
    // (milliseconds), which would swamp the steady figure. Rare calls are all timed after it.
    const std::uint64_t n = p.cost.calls++;
    const bool timed = n > 0 && (p.cost.cadence != metric_cadence::fast || n % kTimeEvery == 1);
    if (!timed) {
      p.fill(s);
      continue;
    }
    const double c0 = thread_cpu_s();
    p.fill(s);
    p.cost.timed_cpu_s += thread_cpu_s() - c0;
    ++p.cost.timed;
  }
  return s;
}

std::vector<call_cost> nvml_metric_source::call_costs() const {
  std::lock_guard lock(mutex_);
  std::vector<call_cost> out;
  out.reserve(probes_.size());
  for (const auto& p : probes_) out.push_back(p.cost);
  return out;
}

std::vector<metric_summary> summarize_samples(const std::vector<gpu_sample>& samples) {
  std::vector<metric_summary> out;
  for (std::size_t k = 0; k < kGpuMetricCount; ++k) {
    metric_summary m;
    m.metric = static_cast<gpu_metric>(k);
    std::vector<double> v;
    for (const auto& s : samples) {
      const auto& r = s.values[k];
      if (r.ok())
        v.push_back(r.value);
      else if (m.status == metric_status::unavailable)
        m.status = r.status;
    }
    if (!v.empty()) {
      const summary st = summarize(v);
      m.status = metric_status::ok;
      m.samples = v.size();
      m.mean = st.mean;
      m.min = st.min;
      m.max = st.max;
      m.p50 = st.median;
      m.p95 = quantile(v, 0.95);
    }
    out.push_back(m);
  }
  return out;
}

energy_use energy_between(const std::vector<gpu_sample>& samples) {
  energy_use e;
  const gpu_sample* first = nullptr;
  const gpu_sample* last = nullptr;
  for (const auto& s : samples) {
    const auto& r = s[gpu_metric::energy_j];
    if (r.ok()) {
      if (!first) first = &s;
      last = &s;
    } else if (e.status == metric_status::unavailable) {
      e.status = r.status;
    }
  }
  if (first && last != first) {
    e.status = metric_status::ok;
    e.joules = (*last)[gpu_metric::energy_j].value - (*first)[gpu_metric::energy_j].value;
    e.seconds = last->time_s - first->time_s;
  } else if (first) {
    e.status = metric_status::unavailable;  // one reading spans no time
  }
  return e;
}

sampler::sampler(std::shared_ptr<metric_source> source, int interval_ms, std::size_t capacity,
                 int slow_interval_ms, int medium_interval_ms, int averaged_interval_ms)
    : source_(std::move(source)),
      interval_ms_(interval_ms),
      capacity_(capacity),
      slow_interval_ms_(slow_interval_ms),
      medium_interval_ms_(medium_interval_ms),
      averaged_interval_ms_(averaged_interval_ms) {
  GPU_BASICS_EXPECTS(source_ != nullptr, "a sampler needs a source");
  GPU_BASICS_EXPECTS(interval_ms >= 1 && interval_ms <= 1000, "sample interval outside 1..1000 ms");
  GPU_BASICS_EXPECTS(slow_interval_ms >= interval_ms && slow_interval_ms <= 60000,
                     "slow-metric interval outside interval..60000 ms");
  GPU_BASICS_EXPECTS(medium_interval_ms >= 1 && medium_interval_ms <= 60000,
                     "medium-metric interval outside 1..60000 ms");
  GPU_BASICS_EXPECTS(averaged_interval_ms >= 1 && averaged_interval_ms <= 60000,
                     "averaged-metric interval outside 1..60000 ms");
  GPU_BASICS_EXPECTS(capacity >= 1, "a sampler keeps at least one sample");
  medium_interval_ms_ = std::clamp(medium_interval_ms, interval_ms, slow_interval_ms);
  averaged_interval_ms_ = std::clamp(averaged_interval_ms, medium_interval_ms_, slow_interval_ms);
}

sampler::~sampler() {
  stop();
}

void sampler::start() {
  start_once(running_, thread_, [this] { loop(); });
}

void sampler::stop() {
  stop_once(running_, thread_);
}

void sampler::push(gpu_sample s) {
  std::lock_guard lock(mutex_);
  if (ring_.size() == capacity_) {
    ring_.pop_front();
    ++dropped_;
  }
  ring_.push_back(s);
}

void sampler::loop() {
  const double cpu0 = thread_cpu_s(), wall0 = host_seconds();
  const auto period = std::chrono::milliseconds(interval_ms_);
  const auto slow_period = std::chrono::milliseconds(slow_interval_ms_);
  const auto medium_period = std::chrono::milliseconds(medium_interval_ms_);
  const auto averaged_period = std::chrono::milliseconds(averaged_interval_ms_);
  auto next = std::chrono::steady_clock::now();
  auto next_slow = next, next_averaged = next, next_medium = next;
  double slow_cpu = 0;
  std::size_t slow_n = 0;
  const auto read = [&](metric_cadence deepest) {
    const bool slow = deepest == metric_cadence::slow;
    const double c0 = slow ? thread_cpu_s() : 0.0;
    push(source_->read(deepest));
    if (slow) {
      slow_cpu += thread_cpu_s() - c0;
      ++slow_n;
    }
  };
  while (running_.load()) {
    const auto now = std::chrono::steady_clock::now();
    metric_cadence deepest = metric_cadence::fast;
    if (now >= next_slow) {
      deepest = metric_cadence::slow;
      next_slow = now + slow_period;
    } else if (now >= next_averaged) {
      deepest = metric_cadence::averaged;
    } else if (now >= next_medium) {
      deepest = metric_cadence::medium;
    }
    // A read of a cadence reads the more frequent ones too: their periods restart with it.
    if (deepest >= metric_cadence::averaged) next_averaged = now + averaged_period;
    if (deepest >= metric_cadence::medium) next_medium = now + medium_period;
    read(deepest);
    next = next_deadline(next, now, period);
    sleep_until_monotonic(next);
  }
  read(metric_cadence::slow);  // the last sample closes the window of the slow counters
  slow_cpu_s_ = slow_cpu;
  slow_samples_ = slow_n;
  cpu_s_ = thread_cpu_s() - cpu0;
  wall_s_ = host_seconds() - wall0;
}

wake_floor::wake_floor(int interval_ms) : interval_ms_(interval_ms) {
  GPU_BASICS_EXPECTS(interval_ms >= 1 && interval_ms <= 1000, "wake interval outside 1..1000 ms");
}

wake_floor::~wake_floor() {
  stop();
}

void wake_floor::start() {
  start_once(running_, thread_, [this] {
    const double cpu0 = thread_cpu_s(), wall0 = host_seconds();
    const auto period = std::chrono::milliseconds(interval_ms_);
    auto next = std::chrono::steady_clock::now();
    std::size_t n = 0;
    while (running_.load()) {  // the sampler's loop without its reads
      next = next_deadline(next, std::chrono::steady_clock::now(), period);
      sleep_until_monotonic(next);
      ++n;
    }
    wakes_ = n;
    cpu_s_ = thread_cpu_s() - cpu0;
    wall_s_ = host_seconds() - wall0;
  });
}

void wake_floor::stop() {
  stop_once(running_, thread_);
}

double sampler::steady_cpu_fraction() const {
  std::size_t all = 0;
  {
    std::lock_guard lock(mutex_);
    all = ring_.size() + dropped_.load();
  }
  const std::size_t slow = slow_samples_.load();
  if (slow == 0 || all <= slow) return 0.0;
  const double fast_each = (cpu_s_.load() - slow_cpu_s_.load()) / static_cast<double>(all - slow);
  const double slow_each = slow_cpu_s_.load() / static_cast<double>(slow);
  return fast_each / (interval_ms_ * 1e-3) + slow_each / (slow_interval_ms_ * 1e-3);
}

std::vector<gpu_sample> sampler::samples() const {
  std::lock_guard lock(mutex_);
  return {ring_.begin(), ring_.end()};
}

std::string samples_csv(const std::vector<gpu_sample>& samples) {
  std::string out = "time_s";
  for (std::size_t k = 0; k < kGpuMetricCount; ++k)
    out += "," + std::string(metric_name(static_cast<gpu_metric>(k)));
  out += "\n";
  const double t0 = samples.empty() ? 0.0 : samples.front().time_s;
  for (const auto& s : samples) {
    out += fmt::format("{:.6f}", s.time_s - t0);
    for (const auto& r : s.values)
      out += r.ok() ? fmt::format(",{:.17g}", r.value) : std::string(",");
    out += "\n";
  }
  return out;
}

nlohmann::json samples_json(const std::vector<gpu_sample>& samples) {
  nlohmann::json names = nlohmann::json::array(), rows = nlohmann::json::array();
  for (std::size_t k = 0; k < kGpuMetricCount; ++k)
    names.push_back(metric_name(static_cast<gpu_metric>(k)));
  const double t0 = samples.empty() ? 0.0 : samples.front().time_s;
  for (const auto& s : samples) {
    nlohmann::json row{{"time_s", s.time_s - t0}};
    for (std::size_t k = 0; k < kGpuMetricCount; ++k)
      row[names[k].get<std::string>()] =
          s.values[k].ok() ? nlohmann::json(s.values[k].value) : nlohmann::json(nullptr);
    rows.push_back(std::move(row));
  }
  return {{"metrics", names}, {"samples", rows}};
}

void to_json(nlohmann::json& j, const metric_summary& s) {
  const bool ok = s.status == metric_status::ok;
  const auto v = [&](double x) { return ok ? nlohmann::json(x) : nlohmann::json(nullptr); };
  j = {{"metric", metric_name(s.metric)},
       {"status", to_string(s.status)},
       {"samples", s.samples},
       {"mean", v(s.mean)},
       {"min", v(s.min)},
       {"max", v(s.max)},
       {"p50", v(s.p50)},
       {"p95", v(s.p95)}};
}

}  // namespace gpu_basics

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/profiler/sampler.hpp"

using namespace gpu_basics;

namespace {
/// Utilization ramps 0, 1, 2, ...; power is not supported; temperature needs permission.
gpu_sample scripted(std::size_t n) {
  gpu_sample s;
  s.time_s = static_cast<double>(n) * 0.01;
  for (auto& r : s.values) r = {metric_status::ok, 1.0};
  s[gpu_metric::gpu_util_percent] = {metric_status::ok, static_cast<double>(n % 101)};
  s[gpu_metric::power_w] = {metric_status::not_supported, 0};
  s[gpu_metric::temperature_c] = {metric_status::no_permission, 0};
  return s;
}
}  // namespace

TEST(Sampler, SummariesCarryValuesAndStatuses) {
  std::vector<gpu_sample> v;
  for (std::size_t i = 0; i <= 100; ++i) v.push_back(scripted(i));
  const auto sums = summarize_samples(v);
  ASSERT_EQ(sums.size(), kGpuMetricCount);
  const auto& util = sums[static_cast<std::size_t>(gpu_metric::gpu_util_percent)];
  EXPECT_EQ(util.status, metric_status::ok);
  EXPECT_EQ(util.samples, 101u);
  EXPECT_DOUBLE_EQ(util.mean, 50.0);
  EXPECT_DOUBLE_EQ(util.min, 0.0);
  EXPECT_DOUBLE_EQ(util.max, 100.0);
  EXPECT_DOUBLE_EQ(util.p50, 50.0);
  EXPECT_DOUBLE_EQ(util.p95, 95.0);
  EXPECT_EQ(sums[static_cast<std::size_t>(gpu_metric::power_w)].status,
            metric_status::not_supported);
  EXPECT_EQ(sums[static_cast<std::size_t>(gpu_metric::temperature_c)].status,
            metric_status::no_permission);
  const nlohmann::json j = sums[static_cast<std::size_t>(gpu_metric::power_w)];
  EXPECT_TRUE(j["mean"].is_null());
  EXPECT_EQ(j["status"], "not supported");
  EXPECT_EQ(nlohmann::json(util)["p95"], 95.0);
}

TEST(Sampler, JsonWritesNullAndCsvLeavesEmptyWhereThereIsNoValue) {
  const std::vector<gpu_sample> v = {scripted(3), scripted(4)};
  const auto j = nlohmann::json::parse(samples_json(v).dump());
  ASSERT_EQ(j["samples"].size(), 2u);
  EXPECT_TRUE(j["samples"][0]["power_w"].is_null());
  EXPECT_EQ(j["samples"][1]["gpu_util_percent"], 4.0);
  EXPECT_NEAR(j["samples"][1]["time_s"].get<double>(), 0.01, 1e-12);
  std::istringstream csv(samples_csv(v));
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_EQ(header.rfind("time_s,gpu_util_percent,", 0), 0u);
  const auto power_col = static_cast<std::size_t>(gpu_metric::power_w) + 1;
  std::vector<std::string> cells;
  std::stringstream ss(row);
  for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
  ASSERT_GT(cells.size(), power_col);
  EXPECT_EQ(cells[power_col], "");
  EXPECT_EQ(cells[1], "3");
}

TEST(Sampler, SamplesAtItsIntervalKeepsABoundedRingAndMeasuresItself) {
  auto src = std::make_shared<fake_metric_source>(scripted);
  sampler s(src, 5, 20);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.stop();
  const auto samples = s.samples();
  EXPECT_EQ(samples.size(), 20u);  // the ring keeps the newest 20
  EXPECT_GE(src->reads(), 30u);    // ~60 at 5 ms; a loaded CI machine still gets half
  EXPECT_LE(src->reads(), 70u);
  EXPECT_EQ(s.dropped(), src->reads() - 20);
  EXPECT_EQ(samples.back()[gpu_metric::gpu_util_percent].value,
            static_cast<double>((src->reads() - 1) % 101));
  EXPECT_GT(s.wall_seconds(), 0.25);
  EXPECT_LT(s.cpu_seconds(), 0.5 * s.wall_seconds());  // sleeping, not spinning
}

TEST(WakeFloor, WakesAtItsIntervalAndSleepsBetween) {
  wake_floor f(10);
  f.start();
  f.start();  // nothing while it runs
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  f.stop();
  f.stop();
  // About one wake-up per 10 ms of its life, never more (no bursts), and at least a few even
  // when a loaded machine stalls the thread.
  EXPECT_GT(f.wall_seconds(), 0.25);
  EXPECT_GE(f.wakes(), 5u);
  EXPECT_LE(static_cast<double>(f.wakes()), f.wall_seconds() / 0.010 + 2);
  EXPECT_GT(f.cpu_seconds(), 0.0);
  EXPECT_LT(f.cpu_seconds(), 0.5 * f.wall_seconds());  // sleeping, not spinning
  EXPECT_THROW(wake_floor(0), logic_error);
  EXPECT_THROW(wake_floor(1001), logic_error);
}

TEST(Sampler, ReadsSlowMetricsFirstAtTheirIntervalAndLast) {
  auto src = std::make_shared<fake_metric_source>([](std::size_t n) {
    gpu_sample s = scripted(n);
    s[gpu_metric::energy_j] = {metric_status::ok, 100.0 + 2.0 * static_cast<double>(n)};
    return s;
  });
  sampler s(src, 2, 100000, 100);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  s.stop();
  const auto samples = s.samples();
  ASSERT_EQ(samples.size(), src->reads());
  ASSERT_GE(samples.size(), 40u);
  EXPECT_TRUE(samples.front()[gpu_metric::energy_j].ok());
  EXPECT_TRUE(samples.back()[gpu_metric::energy_j].ok());
  EXPECT_FALSE(samples[1][gpu_metric::energy_j].ok());
  EXPECT_EQ(samples[1][gpu_metric::energy_j].status, metric_status::unavailable);
  EXPECT_TRUE(samples[1][gpu_metric::sm_clock_mhz].ok());
  // First, about every 100 ms over 350 ms, and the last: 4 to 6 slow reads, not one per sample.
  EXPECT_GE(src->slow_reads(), 4u);
  EXPECT_LE(src->slow_reads(), 6u);
  EXPECT_EQ(s.slow_samples(), src->slow_reads());
  EXPECT_LE(s.slow_cpu_seconds(), s.cpu_seconds());
  EXPECT_GE(s.steady_cpu_fraction(), 0.0);
  EXPECT_LT(s.steady_cpu_fraction(), 0.5);  // a fake source costs next to nothing
  const energy_use e = energy_between(samples);
  ASSERT_EQ(e.status, metric_status::ok);
  EXPECT_DOUBLE_EQ(e.joules, 2.0 * static_cast<double>(samples.size() - 1));
  EXPECT_DOUBLE_EQ(e.seconds, samples.back().time_s - samples.front().time_s);
  EXPECT_GT(e.mean_watts(), 0.0);
}

TEST(Sampler, ReadsMediumMetricsAtTheirOwnInterval) {
  auto src = std::make_shared<fake_metric_source>([](std::size_t n) {
    gpu_sample s = scripted(n);
    s[gpu_metric::sm_clock_mhz] = {metric_status::ok, 1980.0};
    s[gpu_metric::temperature_c] = {metric_status::ok, 40.0 + static_cast<double>(n)};
    s[gpu_metric::clock_event_reasons] = {metric_status::ok, 0.0};
    return s;
  });
  sampler s(src, 2, 100000, 1000, 50);
  EXPECT_EQ(s.medium_interval_ms(), 50);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(320));
  s.stop();
  const auto samples = s.samples();
  ASSERT_GE(samples.size(), 40u);
  // First, about every 50 ms over 320 ms, and the last: 5 to 9 reads with the medium metrics,
  // each one of the samples that hold them.
  EXPECT_GE(src->medium_reads(), 5u);
  EXPECT_LE(src->medium_reads(), 9u);
  std::size_t with_medium = 0;
  for (const auto& x : samples) {
    EXPECT_TRUE(x[gpu_metric::sm_clock_mhz].ok());
    with_medium += x[gpu_metric::temperature_c].ok();
    EXPECT_EQ(x[gpu_metric::temperature_c].ok(), x[gpu_metric::gpu_util_percent].ok());
    EXPECT_EQ(x[gpu_metric::temperature_c].ok(), x[gpu_metric::memory_used_bytes].ok());
    EXPECT_EQ(x[gpu_metric::temperature_c].ok(), x[gpu_metric::clock_event_reasons].ok());
  }
  EXPECT_EQ(with_medium, src->medium_reads());
  EXPECT_TRUE(samples.front()[gpu_metric::temperature_c].ok());
  EXPECT_TRUE(samples.back()[gpu_metric::temperature_c].ok());
  EXPECT_FALSE(samples[1][gpu_metric::temperature_c].ok());
  // The medium interval is kept between the sample interval and the slow one; the averaged
  // interval between the medium and the slow one.
  EXPECT_EQ(sampler(src, 10, 100, 5000, 1).medium_interval_ms(), 10);
  EXPECT_EQ(sampler(src, 10, 100, 200, 1000).medium_interval_ms(), 200);
  EXPECT_EQ(sampler(src, 10, 100, 5000, 200, 50).averaged_interval_ms(), 200);
  EXPECT_EQ(sampler(src, 10, 100, 500, 200, 1000).averaged_interval_ms(), 500);
  EXPECT_EQ(sampler(src, 10).averaged_interval_ms(), 500);
  EXPECT_EQ(sampler(src, 10).interval_ms_of(metric_cadence::averaged), 500);
  EXPECT_EQ(sampler(src, 10).slow_interval_ms(), 10000);
  EXPECT_EQ(sampler(src, 10).interval_ms_of(metric_cadence::medium), 200);
}

TEST(Sampler, ReadsPowerAtTheAveragedIntervalWithTheMediumMetrics) {
  // Power costs hundreds of microseconds a read and NVML smooths it: a cadence of its own.
  EXPECT_EQ(cadence_of(gpu_metric::power_w), metric_cadence::averaged);
  EXPECT_EQ(cadence_of(gpu_metric::gpu_util_percent), metric_cadence::medium);
  EXPECT_EQ(to_string(metric_cadence::averaged), "averaged");
  EXPECT_LT(metric_cadence::medium, metric_cadence::averaged);
  EXPECT_LT(metric_cadence::averaged, metric_cadence::slow);

  auto src = std::make_shared<fake_metric_source>([](std::size_t n) {
    gpu_sample s = scripted(n);
    s[gpu_metric::power_w] = {metric_status::ok, 400.0};
    s[gpu_metric::energy_j] = {metric_status::ok, 1.0 * static_cast<double>(n)};
    return s;
  });
  sampler s(src, 2, 100000, 10000, 20, 100);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(430));
  s.stop();
  const auto samples = s.samples();
  ASSERT_GE(samples.size(), 60u);
  // First, about every 100 ms over 430 ms, and the last: 5 to 7 reads with power; medium ones
  // about every 20 ms (power's among them), slow ones only at the ends.
  EXPECT_GE(src->averaged_reads(), 5u);
  EXPECT_LE(src->averaged_reads(), 7u);
  EXPECT_GE(src->medium_reads(), 2 * src->averaged_reads());
  EXPECT_EQ(src->slow_reads(), 2u);
  std::size_t with_power = 0;
  for (const auto& x : samples) {
    with_power += x[gpu_metric::power_w].ok();
    // A read of a cadence includes the more frequent ones.
    EXPECT_TRUE(!x[gpu_metric::power_w].ok() || x[gpu_metric::gpu_util_percent].ok());
    EXPECT_TRUE(!x[gpu_metric::energy_j].ok() || x[gpu_metric::power_w].ok());
  }
  EXPECT_EQ(with_power, src->averaged_reads());
  EXPECT_TRUE(samples.front()[gpu_metric::power_w].ok());
  EXPECT_TRUE(samples.back()[gpu_metric::power_w].ok());
}

TEST(Sampler, EnergyNeedsTwoReadingsAndKeepsTheirStatus) {
  std::vector<gpu_sample> v = {scripted(0), scripted(1)};
  v[0][gpu_metric::energy_j] = {metric_status::not_supported, 0};
  v[1][gpu_metric::energy_j] = {metric_status::not_supported, 0};
  EXPECT_EQ(energy_between(v).status, metric_status::not_supported);
  v[1][gpu_metric::energy_j] = {metric_status::ok, 5.0};
  EXPECT_NE(energy_between(v).status, metric_status::ok);  // one reading spans no time
  EXPECT_EQ(energy_between({}).status, metric_status::unavailable);
}

TEST(Sampler, RejectsBadSettings) {
  auto src = std::make_shared<fake_metric_source>(scripted);
  EXPECT_THROW(sampler(src, 0), logic_error);
  EXPECT_THROW(sampler(src, 1001), logic_error);
  EXPECT_THROW(sampler(nullptr, 10), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 5), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 60001), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 5000, 0), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 5000, 60001), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 5000, 200, 0), logic_error);
  EXPECT_THROW(sampler(src, 10, 100, 5000, 200, 60001), logic_error);
}

TEST(Nvml, MissingLibraryOrDriverIsOneClearReason) {
  std::string why;
  const auto nv = nvml::open(&why);
  if (nv) GTEST_SKIP() << "NVML is available here";
  EXPECT_NE(why.find("NVML not available"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

#include "gpu_basics/profiler/timing.hpp"

TEST(TimingRegistry, KeyAveragesAggregateAndSortByGpuTime) {
  timing_registry reg;
  reg.record("copy", 0.002, 0.00001);
  reg.record("matmul", 0.010, 0.00002);
  reg.record("copy", 0.004, 0.00003);
  reg.record("matmul", 0.012, 0.00002);
  reg.record("matmul", 0.014, 0.00002);
  const auto r = reg.regions();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "matmul");
  EXPECT_EQ(r[0].calls, 3u);
  EXPECT_DOUBLE_EQ(r[0].gpu_total_s, 0.036);
  EXPECT_DOUBLE_EQ(r[0].gpu_mean_s(), 0.012);
  EXPECT_DOUBLE_EQ(r[0].gpu_min_s, 0.010);
  EXPECT_DOUBLE_EQ(r[0].gpu_max_s, 0.014);
  EXPECT_DOUBLE_EQ(r[1].host_mean_s(), 0.00002);
  reg.clear();
  EXPECT_TRUE(reg.regions().empty());
}

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/profiler/trace_counters.hpp"
#include "gpu_basics/profiler/trace_session.hpp"

using namespace gpu_basics;

TEST(TraceSchedule, PhasesFollowWaitWarmupActive) {
  const trace_schedule s{2, 1, 3};
  const trace_phase want[] = {trace_phase::waiting, trace_phase::waiting, trace_phase::warming_up,
                              trace_phase::active,  trace_phase::active,  trace_phase::active,
                              trace_phase::done,    trace_phase::done};
  for (long i = 0; i < 8; ++i) EXPECT_EQ(phase_at(s, i), want[i]) << "step " << i;
  EXPECT_EQ(phase_at({0, 0, 0}, 0), trace_phase::active);
  EXPECT_EQ(phase_at({0, 0, 0}, 100000), trace_phase::active);  // active 0: until finish()
}

namespace {
/// Records a kernel per step while started; start/stop counted.
class fake_tracer final : public activity_tracer {
 public:
  int* starts;
  int* stops;
  fake_tracer(int* a, int* b) : starts(a), stops(b) {}
  void start() override {
    ++*starts;
    log_ = {};
    range_log::start_recording();
  }
  activity_log stop() override {
    ++*stops;
    log_.ranges = range_log::stop_recording();
    return std::move(log_);
  }
  void kernel(const std::string& name) {
    kernel_record k;
    k.name = name;
    k.start_ns = host_clock_ns();
    k.end_ns = k.start_ns + 10;
    log_.kernels.push_back(k);
  }

 private:
  activity_log log_;
};

void tick() {  // the session's window is on the clock: let it move
  const auto t = host_clock_ns();
  while (host_clock_ns() == t) {
  }
}
}  // namespace

TEST(TraceSession, KeepsOnlyTheActiveStepsAndStartsTheTracerOnce) {
  int starts = 0, stops = 0;
  auto t = std::make_unique<fake_tracer>(&starts, &stops);
  fake_tracer* raw = t.get();
  trace_session s(std::move(t), "", {1, 2, 3});
  for (int i = 0; i < 8; ++i) {
    s.step();
    tick();
    scoped_range r("step " + std::to_string(i));
    if (s.phase() != trace_phase::waiting && s.phase() != trace_phase::done)
      raw->kernel("k" + std::to_string(i));
    tick();
  }
  const activity_log log = s.finish();
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(stops, 1);
  std::vector<std::string> names;
  for (const auto& k : log.kernels) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{"k3", "k4", "k5"}));  // warm-up steps 1, 2 dropped
  std::vector<std::string> ranges;
  for (const auto& r : log.ranges) ranges.push_back(r.name);
  // Ranges of the active steps only: step 2's (warm-up) started before the window.
  EXPECT_EQ(ranges, (std::vector<std::string>{"step 3", "step 4", "step 5"}));
  EXPECT_LT(s.active_start_ns(), s.active_end_ns());
}

TEST(TraceSession, WithoutATracerKeepsCpuRangesAndSaysWhy) {
  trace_session s(nullptr, "CUPTI unavailable: this build has no CUPTI", {0, 0, 0});
  s.step();
  { scoped_range r("work"); }
  const activity_log log = s.finish();
  EXPECT_EQ(log.source, "CUPTI unavailable: this build has no CUPTI");
  ASSERT_EQ(log.ranges.size(), 1u);
  EXPECT_EQ(log.ranges[0].name, "work");
  EXPECT_EQ(log.ranges[0].thread, trace_thread_id());
  EXPECT_LE(log.ranges[0].start_ns, log.ranges[0].end_ns);
  EXPECT_TRUE(log.kernels.empty());
  EXPECT_FALSE(range_log::recording());
}

TEST(TraceSession, RangesOutsideATraceAreNotKept) {
  { scoped_range r("before"); }
  trace_session s(nullptr, "none", {0, 0, 0});
  s.step();
  std::thread other([] { scoped_range r("other thread"); });
  other.join();
  const auto log = s.finish();
  ASSERT_EQ(log.ranges.size(), 1u);
  EXPECT_EQ(log.ranges[0].name, "other thread");
  EXPECT_NE(log.ranges[0].thread, trace_thread_id());
  EXPECT_THROW(s.step(), logic_error);
  EXPECT_THROW(trace_session(nullptr, "", {-1, 0, 0}), logic_error);
}

TEST(TraceCounters, SamplesBecomeOneSeriesPerMetricWithEnergyFromZero) {
  std::vector<gpu_sample> v(3);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i].time_s = 2.0 + 0.01 * static_cast<double>(i);
    v[i][gpu_metric::gpu_util_percent] = {metric_status::ok, 50.0 + static_cast<double>(i)};
    v[i][gpu_metric::power_w] = {metric_status::not_supported, 0};
    v[i][gpu_metric::memory_total_bytes] = {metric_status::ok, 1e11};
    if (i != 1)
      v[i][gpu_metric::energy_j] = {metric_status::ok, 1000.0 + 7.0 * static_cast<double>(i)};
  }
  trace_writer w;
  EXPECT_EQ(add_sample_counters(w, v, 2'000'000'000ull, 0), 5u);
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  const auto j = w.to_json();
  for (const auto& e : j["traceEvents"]) {
    const auto name = e["name"].get<std::string>();
    series[name].push_back({e["ts"].get<double>(), e["args"][name].get<double>()});
  }
  EXPECT_EQ(series.size(), 2u);
  ASSERT_EQ(series["gpu_util_percent"].size(), 3u);
  EXPECT_NEAR(series["gpu_util_percent"][2].first, 20000.0, 1e-3);  // 20 ms after the origin, in us
  EXPECT_EQ(series["gpu_util_percent"][2].second, 52.0);
  ASSERT_EQ(series["energy_used_j"].size(), 2u);
  EXPECT_EQ(series["energy_used_j"][0].second, 0.0);
  EXPECT_EQ(series["energy_used_j"][1].second, 14.0);
}

TEST(TraceCounters, AllocatorHistoryBecomesAllocatedAndReservedBytes) {
  const std::vector<history_event> h = {{history_kind::segment_alloc, 1000, 0x1000, 2 << 20, 0},
                                        {history_kind::alloc, 1100, 0x1000, 512, 0},
                                        {history_kind::alloc, 1200, 0x1200, 1024, 0},
                                        {history_kind::oom, 1250, 0, 1ull << 40, 0},
                                        {history_kind::free, 1300, 0x1000, 512, 0},
                                        {history_kind::segment_free, 1400, 0x1000, 2 << 20, 0}};
  // memory/ turns the history into plain points (the oom changes nothing: no point)...
  const auto points = memory_usage(h, 4096, 8 << 20);
  const std::vector<memory_usage_point> want_points = {
      {1000, 4096, (8 << 20) + (2 << 20)},
      {1100, 4096 + 512, (8 << 20) + (2 << 20)},
      {1200, 4096 + 512 + 1024, (8 << 20) + (2 << 20)},
      {1300, 4096 + 1024, (8 << 20) + (2 << 20)},
      {1400, 4096 + 1024, 8 << 20}};
  EXPECT_EQ(points, want_points);
  // ...and the profiler plots them: both series at the first point, then whichever changed.
  trace_writer w;
  EXPECT_EQ(add_memory_counters(w, points, 1000, 3), 6u);
  std::vector<std::pair<std::string, double>> got;
  const auto j = w.to_json();
  for (const auto& e : j["traceEvents"]) {
    const auto name = e["name"].get<std::string>();
    got.push_back({name, e["args"][name].get<double>()});
    EXPECT_EQ(e["pid"], 3);
  }
  const std::vector<std::pair<std::string, double>> want = {
      {"allocated_bytes", 4096},        {"reserved_bytes", (8 << 20) + (2 << 20)},
      {"allocated_bytes", 4096 + 512},  {"allocated_bytes", 4096 + 512 + 1024},
      {"allocated_bytes", 4096 + 1024}, {"reserved_bytes", 8 << 20}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(add_memory_counters(w, {}, 0, 3), 0u);
}

TEST(Activity, KeepWindowDropsRecordsStartingOutsideIt) {
  activity_log log;
  for (std::uint64_t t : {100, 200, 300}) {
    kernel_record k;
    k.start_ns = t;
    k.end_ns = t + 50;
    log.kernels.push_back(k);
    log.api_calls.push_back({"cudaLaunchKernel", t - 10, t - 5, 1, 0});
    log.syncs.push_back({"stream synchronize", t, t + 1, 0, 0});
  }
  keep_window(log, 150, 300);
  ASSERT_EQ(log.kernels.size(), 1u);
  EXPECT_EQ(log.kernels[0].start_ns, 200u);
  EXPECT_EQ(log.api_calls.size(), 2u);  // 190 and 290
  EXPECT_EQ(log.syncs.size(), 1u);
  const auto c = activity_counts(log);
  EXPECT_EQ(c["kernels"], 1);
  EXPECT_EQ(c["api_calls"], 2);
}

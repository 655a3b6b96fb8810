// The host's CPU load over a lesson (core/host_cpu.hpp): /proc/stat's aggregate line parsed,
// shares of stolen, busy and own time computed from two readings, the JSON record, and the meter
// on this machine seeing its own process work.
#include <sys/resource.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/host_cpu.hpp"
#include "gpu_basics/core/json.hpp"

namespace gb = gpu_basics;

TEST(HostCpu, TheAggregateLineOfProcStatIsRead) {
  const auto t = gb::parse_proc_stat(
      "cpu  100 5 50 800 20 3 2 20 0 0\ncpu0 50 2 25 400 10 1 1 10 0 0\nintr 1 2 3\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->total, 1000u);
  EXPECT_EQ(t->idle, 820u);
  EXPECT_EQ(t->steal, 20u);
  // Old kernels have no steal column: four fields are enough.
  const auto old = gb::parse_proc_stat("cpu 1 2 3 4\n");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->total, 10u);
  EXPECT_EQ(old->steal, 0u);
  EXPECT_FALSE(gb::parse_proc_stat("cpu0 1 2 3 4\n"));  // per-CPU lines only
  EXPECT_FALSE(gb::parse_proc_stat("cpu 1 2 x\n"));
  EXPECT_FALSE(gb::parse_proc_stat(""));
}

TEST(HostCpu, SharesAreOfAllCpuTimeBetweenTwoReadings) {
  const gb::cpu_ticks a{1000, 800, 10};
  // 400 ticks later (4 s of 1 CPU at 100 Hz... or 1 s of 4): 100 idle, 40 stolen, 260 busy.
  const gb::cpu_ticks b{1400, 900, 50};
  const auto l = gb::load_between(a, b, 1.0, 100, 4);  // this process: 1 s = 100 ticks
  EXPECT_EQ(l.cpus, 4u);
  EXPECT_DOUBLE_EQ(l.steal, 0.1);
  EXPECT_DOUBLE_EQ(l.busy, 0.65);
  EXPECT_DOUBLE_EQ(l.self, 0.25);
  EXPECT_DOUBLE_EQ(l.others, 0.4);
  // Own time beyond what the counters saw busy (tick rounding) is capped at busy.
  const auto capped = gb::load_between(a, b, 10.0, 100, 4);
  EXPECT_DOUBLE_EQ(capped.self, capped.busy);
  EXPECT_DOUBLE_EQ(capped.others, 0);
  // No tick in between: nothing to share.
  EXPECT_EQ(gb::load_between(a, a, 0.5, 100, 4).busy, 0);
}

TEST(HostCpu, TheRecordReadsBackAndRejectsWrongTypes) {
  gb::host_cpu_load l{16, 0.02, 0.5, 0.1, 0.4, 3.5};
  const nlohmann::json j = l;
  EXPECT_EQ(j.at("others"), 0.4);
  EXPECT_EQ(j.get<gb::host_cpu_load>(), l);
  l.load_1m.reset();
  EXPECT_TRUE(nlohmann::json(l).at("load_1m").is_null());
  EXPECT_EQ(nlohmann::json(l).get<gb::host_cpu_load>(), l);
  const nlohmann::json wrong = {{"steal", "high"}};
  EXPECT_THROW((void)wrong.get<gb::host_cpu_load>(), gb::json_path_error);
}

namespace {

double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

TEST(HostCpu, TheMeterSeesThisProcessWork) {
  const gb::host_cpu_meter meter;
  // Work for 0.3 s of CPU time, however long the wall time under a loaded machine.
  const double t0 = own_cpu_seconds();
  volatile double x = 1;
  while (own_cpu_seconds() - t0 < 0.3) x = x * 1.0000001 + 1e-9;
  const auto l = meter.load();
  ASSERT_TRUE(l) << "/proc/stat could not be read";
  EXPECT_GE(l->cpus, 1u);
  EXPECT_GT(l->self, 0.0);
  EXPECT_LE(l->self, l->busy);
  EXPECT_LE(l->busy + l->steal, 1.0 + 1e-9);
  EXPECT_NEAR(l->others, l->busy - l->self, 1e-12);
  EXPECT_TRUE(l->load_1m);
}

// Profiler parts on the GPU: NVML sampling sees the GPU get busy; region timers measure kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/profiler/gpu_timer.hpp"
#include "gpu_basics/profiler/sampler.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/pipeline.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;

TEST(GpuProfiler, NvmlSamplerSeesUtilizationRiseUnderLoad) {
  SKIP_WITHOUT_GPU();
  std::string why;
  auto nv = nvml::open(&why);
  ASSERT_TRUE(nv) << why;
  const device_info d = query_device(0, nullptr);
  const auto dev = nv->device_by_pci_bus_id(d.pci_bus_id);
  ASSERT_TRUE(dev.ok());
  auto src = std::make_shared<nvml_metric_source>(nv, dev.value);
  const std::size_t bytes = 256u << 20;
  device_buffer data(bytes), sum(sizeof(unsigned long long));
  cuda_stream s;
  enqueue_fill_pattern(data.data(), bytes, 1, s);
  s.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the idle reading settle
  const double idle = src->read()[gpu_metric::gpu_util_percent].value;
  {
    const double t0 = host_seconds();
    (void)src->read();
    std::printf("one NVML sample of all metrics took %.1f ms\n", (host_seconds() - t0) * 1e3);
  }
  sampler smp(src, 10);
  smp.start();
  for (int i = 0; i < 20; ++i) enqueue_lcg_checksum(data.data(), bytes, 20000, sum.as<unsigned long long>(), s);
  s.synchronize();  // ~1.5 s of work
  smp.stop();
  const auto samples = smp.samples();
  std::printf("%zu samples in %.2f s\n", samples.size(), smp.wall_seconds());
  ASSERT_GE(samples.size(), 5u);
  const auto sums = summarize_samples(samples);
  const auto& util = sums[static_cast<std::size_t>(gpu_metric::gpu_util_percent)];
  ASSERT_EQ(util.status, metric_status::ok);
  EXPECT_GE(util.max, 90.0) << "idle reading was " << idle;
  EXPECT_EQ(sums[static_cast<std::size_t>(gpu_metric::memory_total_bytes)].status, metric_status::ok);
  EXPECT_GT(sums[static_cast<std::size_t>(gpu_metric::sm_clock_mhz)].max, 0.0);
  EXPECT_LT(smp.cpu_seconds(), 0.05 * smp.wall_seconds()) << "sampler cost too much CPU at 100 Hz";
}

TEST(GpuProfiler, RegionTimerMeasuresTheKernelNotTheLaunch) {
  SKIP_WITHOUT_GPU();
  const std::size_t bytes = 64u << 20;
  device_buffer data(bytes), sum(sizeof(unsigned long long));
  cuda_stream s;
  enqueue_fill_pattern(data.data(), bytes, 1, s);
  timing_registry reg;
  {
    gpu_timing timing(reg);
    for (int i = 0; i < 3; ++i) {
      gpu_timing::scope t(timing, "lcg", s);
      enqueue_lcg_checksum(data.data(), bytes, 5000, sum.as<unsigned long long>(), s);
    }
    timing.flush();
  }
  const auto r = reg.regions();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].calls, 3u);
  // The launch returns in microseconds; the kernel runs for milliseconds.
  EXPECT_GT(r[0].gpu_mean_s(), 10 * r[0].host_mean_s()) << r[0].gpu_mean_s() << " vs " << r[0].host_mean_s();
  EXPECT_GT(r[0].gpu_min_s, 1e-4);
}

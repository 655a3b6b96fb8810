// Profiler parts on the GPU: NVML sampling sees the GPU get busy; region timers measure kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/profiler/activity.hpp"
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
  const double idle = src->read(true)[gpu_metric::gpu_util_percent].value;
  for (const bool slow : {false, true}) {
    const double t0 = host_seconds();
    (void)src->read(slow);
    std::printf("one NVML sample (%s) took %.3f ms\n", slow ? "with the energy counter" : "fast metrics",
                (host_seconds() - t0) * 1e3);
  }
  sampler smp(src, 10);
  smp.start();
  for (int i = 0; i < 20; ++i) enqueue_lcg_checksum(data.data(), bytes, 20000, sum.as<unsigned long long>(), s);
  s.synchronize();  // ~1.5 s of work
  smp.stop();
  const auto samples = smp.samples();
  std::printf("%zu samples in %.2f s, sampler CPU %.2f%% of a core\n", samples.size(), smp.wall_seconds(),
              100.0 * smp.cpu_seconds() / smp.wall_seconds());
  ASSERT_GE(samples.size(), 5u);
  const auto sums = summarize_samples(samples);
  const auto& util = sums[static_cast<std::size_t>(gpu_metric::gpu_util_percent)];
  ASSERT_EQ(util.status, metric_status::ok);
  EXPECT_GE(util.max, 90.0) << "idle reading was " << idle;
  EXPECT_EQ(sums[static_cast<std::size_t>(gpu_metric::memory_total_bytes)].status, metric_status::ok);
  EXPECT_GT(sums[static_cast<std::size_t>(gpu_metric::sm_clock_mhz)].max, 0.0);
  const energy_use e = energy_between(samples);
  ASSERT_EQ(e.status, metric_status::ok);
  EXPECT_GT(e.mean_watts(), 50.0) << e.joules << " J in " << e.seconds << " s";  // an H200 idles near 100 W
  EXPECT_LT(e.mean_watts(), 1500.0);
  // The target is < 1% of a core at 100 Hz (the lesson prints the figure); 3% leaves room for
  // a shared machine. Reading the energy counter every sample cost ~40% here.
  EXPECT_LT(smp.cpu_seconds(), 0.03 * smp.wall_seconds()) << "sampler cost too much CPU at 100 Hz";
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

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "gpu_basics/profiler/gemm_runner.hpp"

TEST(GpuGemm, EveryPrecisionMatchesTheCpuReference) {
  SKIP_WITHOUT_GPU();
  gemm_runner g;
  cuda_stream s;
  for (gemm_precision p : {gemm_precision::fp16, gemm_precision::bf16, gemm_precision::tf32, gemm_precision::fp32}) {
    const double err = g.check(p, 192, s);
    EXPECT_LE(err, gemm_tolerance(p)) << to_string(p);
    EXPECT_GT(err, 0.0) << to_string(p) << ": an exact match on random data means nothing was rounded";
  }
}

TEST(GpuGemm, TunedRunsReportPlausibleThroughput) {
  SKIP_WITHOUT_GPU();
  gemm_runner g;
  cuda_stream s;
  const auto bf16 = g.run(gemm_precision::bf16, {4096, 4096, 4096}, 2, 5, s);
  EXPECT_GE(bf16.candidates, 1);
  EXPECT_GE(bf16.chosen, 0);
  EXPECT_EQ(bf16.seconds.size(), 5u);
  EXPECT_GT(bf16.flops_per_s.median, 50e12);  // tensor cores at work
  EXPECT_LT(bf16.flops_per_s.median, 2000e12);
  const auto fp32 = g.run(gemm_precision::fp32, {2048, 2048, 2048}, 1, 3, s);
  EXPECT_LT(fp32.flops_per_s.median, bf16.flops_per_s.median);
}

TEST(GpuCli, ProfileLessonWritesItsTables) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_profile";
  std::filesystem::remove_all(dir);
  const std::string cmd = std::string(GPU_BASICS_CLI) +
                          " profile --set benchmark.iterations=3 --set 'profiler.matmul.shapes=[[2048, 2048, 2048]]'"
                          " --set output.directory=" + dir.string() + " --json " + (dir / "p.json").string() +
                          " > " + dir.string() + ".txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream j(dir / "p.json");
  const auto doc = nlohmann::json::parse(j);
  std::set<std::string> ids;
  for (const auto& t : doc["tables"]) ids.insert(t["id"].get<std::string>());
  for (const char* id : {"timing_methods", "key_averages", "matmul", "nvml"}) EXPECT_TRUE(ids.count(id)) << id;
  EXPECT_TRUE(std::filesystem::exists(dir / "profile_samples.csv"));
}

#include "gpu_basics/profiler/activity_tracer.hpp"

TEST(GpuTrace, CuptiSeesKernelsByNameCopiesWithBytesAndAFlowPerLaunch) {
  SKIP_WITHOUT_GPU();
  std::string why;
  auto tracer = make_cupti_tracer(&why);
  if (!tracer) GTEST_SKIP() << why;
  const std::size_t bytes = 1u << 20;
  device_buffer data(bytes), sum(sizeof(unsigned long long));
  pinned_buffer host(bytes);
  cuda_stream s;
  tracer->start();
  GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(data.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.value()));
  for (int i = 0; i < 3; ++i) enqueue_lcg_checksum(data.data(), bytes, 10, sum.as<unsigned long long>(), s);
  s.synchronize();
  const activity_log log = tracer->stop();
  int lcg = 0;
  for (const auto& k : log.kernels) lcg += k.name.find("lcg_checksum_kernel") != std::string::npos;
  EXPECT_EQ(lcg, 3);
  bool copy = false;
  for (const auto& m : log.memcpys) copy |= m.kind == memcpy_kind::h2d && m.bytes == bytes && m.pinned;
  EXPECT_TRUE(copy);
  trace_writer w;
  const std::size_t flows = add_activity(w, log, 0);
  EXPECT_EQ(flows, log.kernels.size() + log.memcpys.size() + log.memsets.size());
  EXPECT_EQ(log.dropped_records, 0u);
}

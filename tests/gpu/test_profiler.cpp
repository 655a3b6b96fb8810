// Profiler parts on the GPU: NVML sampling sees the GPU get busy; region timers measure kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/profiler/activity.hpp"
#include "gpu_basics/profiler/gpu_timer.hpp"
#include "gpu_basics/profiler/sampler.hpp"
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
  const double idle = src->read(metric_cadence::slow)[gpu_metric::gpu_util_percent].value;
  for (const auto cadence : {metric_cadence::fast, metric_cadence::medium, metric_cadence::averaged,
                             metric_cadence::slow}) {
    const double t0 = host_seconds();
    (void)src->read(cadence);
    std::printf("one NVML sample (%s and more frequent) took %.3f ms\n",
                std::string(to_string(cadence)).c_str(), (host_seconds() - t0) * 1e3);
  }
  sampler smp(src, 10);
  smp.start();
  // ~3 s of work: long enough that the sampler's fixed costs (thread start, the energy counter
  // read at both ends) weigh little against its steady state.
  for (int i = 0; i < 40; ++i)
    enqueue_lcg_checksum(data.data(), bytes, 20000, sum.as<unsigned long long>(), s);
  s.synchronize();
  smp.stop();
  const auto samples = smp.samples();
  std::printf(
      "%zu samples in %.2f s, sampler CPU %.2f%% of a core (steady state %.2f%%, %zu energy "
      "reads)\n",
      samples.size(), smp.wall_seconds(), 100.0 * smp.cpu_seconds() / smp.wall_seconds(),
      100.0 * smp.steady_cpu_fraction(), smp.slow_samples());
  // Every call the sampler made was counted, some of each timed, at a CPU cost above zero.
  const auto costs = src->call_costs();
  ASSERT_GE(costs.size(), 8u);
  for (const auto& c : costs) {
    std::printf("  %-40s %-6s %6llu calls, %6.1f us of CPU each\n", c.call.c_str(),
                std::string(to_string(c.cadence)).c_str(), static_cast<unsigned long long>(c.calls),
                1e6 * c.cpu_each_s());
    EXPECT_GE(c.calls, 1u) << c.call;
    EXPECT_GE(c.timed, 1u) << c.call;
    EXPECT_GT(c.cpu_each_s(), 0.0) << c.call;
  }
  const auto sm = std::find_if(costs.begin(), costs.end(), [](const call_cost& c) {
    return c.cadence == metric_cadence::fast;
  });
  ASSERT_NE(sm, costs.end());
  EXPECT_GE(sm->calls, samples.size());  // the SM clock: on every sample
  ASSERT_GE(samples.size(), 5u);
  const auto sums = summarize_samples(samples);
  const auto& util = sums[static_cast<std::size_t>(gpu_metric::gpu_util_percent)];
  ASSERT_EQ(util.status, metric_status::ok);
  EXPECT_GE(util.max, 90.0) << "idle reading was " << idle;
  EXPECT_EQ(sums[static_cast<std::size_t>(gpu_metric::memory_total_bytes)].status,
            metric_status::ok);
  EXPECT_GT(sums[static_cast<std::size_t>(gpu_metric::sm_clock_mhz)].max, 0.0);
  const energy_use e = energy_between(samples);
  ASSERT_EQ(e.status, metric_status::ok);
  EXPECT_GT(e.mean_watts(), 50.0) << e.joules << " J in " << e.seconds
                                  << " s";  // an H200 idles near 100 W
  EXPECT_LT(e.mean_watts(), 1500.0);
  // The target is < 1% of a core at 100 Hz in steady state (the lesson prints the figure); on this
  // shared machine the estimate from a 1-3 s run moved between 0.9% and 3%, so the test guards
  // against the regression that matters: reading the energy counter every sample cost ~40%.
  EXPECT_LT(smp.steady_cpu_fraction(), 0.05) << "sampler cost too much CPU at 100 Hz";
  EXPECT_GT(smp.steady_cpu_fraction(), 0.0);
  EXPECT_LT(smp.cpu_seconds(), 0.10 * smp.wall_seconds());
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
  EXPECT_GT(r[0].gpu_mean_s(), 10 * r[0].host_mean_s())
      << r[0].gpu_mean_s() << " vs " << r[0].host_mean_s();
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
  for (gemm_precision p :
       {gemm_precision::fp16, gemm_precision::bf16, gemm_precision::tf32, gemm_precision::fp32}) {
    const double err = g.check(p, 192, s);
    EXPECT_LE(err, gemm_tolerance(p)) << to_string(p);
    EXPECT_GT(err, 0.0) << to_string(p)
                        << ": an exact match on random data means nothing was rounded";
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
  const std::string cmd =
      std::string(GPU_BASICS_CLI) +
      " profile --set benchmark.iterations=3 --set 'profiler.matmul.shapes=[[2048, 2048, 2048]]'"
      " --set output.directory=" +
      dir.string() + " --json " + (dir / "p.json").string() + " > " + dir.string() + ".txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream j(dir / "p.json");
  const auto doc = nlohmann::json::parse(j);
  std::set<std::string> ids;
  for (const auto& t : doc["tables"]) ids.insert(t["id"].get<std::string>());
  for (const char* id : {"timing_methods", "key_averages", "matmul", "nvml"})
    EXPECT_TRUE(ids.count(id)) << id;
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
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(data.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.value()));
  for (int i = 0; i < 3; ++i)
    enqueue_lcg_checksum(data.data(), bytes, 10, sum.as<unsigned long long>(), s);
  s.synchronize();
  const activity_log log = tracer->stop();
  int lcg = 0;
  for (const auto& k : log.kernels) lcg += k.name.find("lcg_checksum_kernel") != std::string::npos;
  EXPECT_EQ(lcg, 3);
  bool copy = false;
  for (const auto& m : log.memcpys)
    copy |= m.kind == memcpy_kind::h2d && m.bytes == bytes && m.pinned;
  EXPECT_TRUE(copy);
  trace_writer w;
  const std::size_t flows = add_activity(w, log, 0);
  EXPECT_EQ(flows, log.kernels.size() + log.memcpys.size() + log.memsets.size());
  EXPECT_EQ(log.dropped_records, 0u);
}

#if GPU_BASICS_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

#include "gpu_basics/profiler/range.hpp"

namespace {
nlohmann::json read_trace(const std::filesystem::path& p) {
  std::string text;
#if GPU_BASICS_TEST_HAVE_ZLIB
  gzFile f = gzopen(p.string().c_str(), "rb");  // reads plain files too
  if (!f) return nullptr;
  char buf[65536];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
#else
  std::ifstream in(p, std::ios::binary);
  if (!in) return nullptr;
  text.assign(std::istreambuf_iterator<char>(in), {});
#endif
  return nlohmann::json::parse(text);
}
}  // namespace

TEST(GpuTrace, RangesShareTheApiCallsThreadTrackAndTheGpuClock) {
  SKIP_WITHOUT_GPU();
  std::string why;
  auto tracer = make_cupti_tracer(&why);
  if (!tracer) GTEST_SKIP() << why;
  const std::size_t bytes = 16u << 20;
  device_buffer data(bytes), sum(sizeof(unsigned long long));
  cuda_stream s;
  enqueue_fill_pattern(data.data(), bytes, 2, s);
  s.synchronize();
  tracer->start();
  const std::uint64_t before = host_clock_ns();
  {
    scoped_range r("work");
    enqueue_lcg_checksum(data.data(), bytes, 2000, sum.as<unsigned long long>(), s);
    s.synchronize();
  }
  const std::uint64_t after = host_clock_ns();
  const activity_log log = tracer->stop();
  ASSERT_EQ(log.ranges.size(), 1u);
  ASSERT_EQ(log.kernels.size(), 1u);
  const auto& k = log.kernels[0];
  const auto& r = log.ranges[0];
  // On one clock: the kernel ran inside the range that launched and waited for it.
  EXPECT_GE(k.start_ns, r.start_ns);
  EXPECT_LE(k.end_ns, r.end_ns);
  EXPECT_GE(r.start_ns, before);
  EXPECT_LE(r.end_ns, after);
  bool launch_on_range_thread = false;
  for (const auto& a : log.api_calls)
    launch_on_range_thread |= a.correlation == k.correlation && a.thread == r.thread;
  EXPECT_TRUE(launch_on_range_thread) << "range thread " << r.thread;
  bool waited = false;
  for (const auto& y : log.syncs) waited |= y.what == "stream synchronize" && y.end_ns >= k.end_ns;
  EXPECT_TRUE(waited);
}

TEST(GpuCli, ProfileTraceHoldsKernelsFlowsCountersAndNothingFromStartUp) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_profile_trace";
  std::filesystem::remove_all(dir);
  const auto trace = dir / (trace_writer::gzip_supported() ? "p.json.gz" : "p.json");
  const std::string cmd =
      std::string(GPU_BASICS_CLI) +
      " profile --set benchmark.iterations=5 --set 'profiler.matmul.shapes=[[2048, 2048, 2048]]'"
      " --set 'profiler.matmul.precisions=[bf16]' --set output.directory=" +
      dir.string() + " --trace " + trace.string() + " --json " + (dir / "p.json").string() + " > " +
      dir.string() + ".txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = read_trace(trace);
  ASSERT_TRUE(j.is_object());
  std::map<std::string, int> cats;
  std::set<std::string> counters, step_ranges;
  bool gemm = false;
  std::map<std::uint64_t, int> flows;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      cats[e["cat"].get<std::string>()]++;
      const auto name = e["name"].get<std::string>();
      if (e["cat"] == "kernel" &&
          (name.find("gemm") != std::string::npos || name.find("Kernel") != std::string::npos))
        gemm = true;
      if (e["cat"] == "user_range" && name.rfind("step ", 0) == 0) step_ranges.insert(name);
    }
    if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
    if (e["ph"] == "s" || e["ph"] == "f") flows[e["id"].get<std::uint64_t>()]++;
  }
  EXPECT_GT(cats["kernel"], 0);
  EXPECT_GT(cats["memcpy"], 0);
  EXPECT_GT(cats["cuda_runtime"], 0);
  EXPECT_TRUE(gemm) << "no cuBLAS kernel in the trace";
  // wait 1, warmup 1: steps 0 and 1 are not in the trace, 2..4 are.
  EXPECT_EQ(step_ranges, (std::set<std::string>{"step 2", "step 3", "step 4"}));
  EXPECT_TRUE(counters.count("gpu_util_percent"));
  EXPECT_TRUE(counters.count("power_w"));
  EXPECT_GT(flows.size(), 0u);
  for (const auto& [id, n] : flows) EXPECT_EQ(n, 2) << "flow " << id;
  EXPECT_EQ(j["metadata"]["counts"]["dropped_records"], 0);
  EXPECT_TRUE(j["metadata"]["environment"].is_object());
  std::ifstream rj(dir / "p.json");
  const auto report = nlohmann::json::parse(rj);
  bool table = false;
  for (const auto& t : report["tables"]) table |= t["id"] == "trace";
  EXPECT_TRUE(table);
}

TEST(GpuCli, MemoryTraceHasAllocatorCountersThatReturnToZero) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_memory_trace";
  std::filesystem::remove_all(dir);
  const auto trace = dir / "m.json";
  const std::string cmd = std::string(GPU_BASICS_CLI) +
                          " memory --set benchmark.iterations=2 --trace " + trace.string() + " > " +
                          dir.string() + ".txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = read_trace(trace);
  ASSERT_TRUE(j.is_object());
  std::vector<double> allocated, reserved;
  int mallocs = 0, ranges = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "allocated_bytes")
      allocated.push_back(e["args"]["allocated_bytes"].get<double>());
    if (e["ph"] == "C" && e["name"] == "reserved_bytes")
      reserved.push_back(e["args"]["reserved_bytes"].get<double>());
    if (e["ph"] == "X" && e["name"] == "cudaMalloc") ++mallocs;
    if (e["ph"] == "X" && e["cat"] == "user_range") ++ranges;
  }
  ASSERT_FALSE(allocated.empty());
  EXPECT_EQ(allocated.back(), 0.0);  // weights and every activation freed
  EXPECT_GE(*std::max_element(allocated.begin(), allocated.end()),
            512.0 * (1 << 20) + 1024.0 * (1 << 20));
  ASSERT_FALSE(reserved.empty());
  EXPECT_EQ(static_cast<int>(reserved.size()), mallocs) << "one cudaMalloc per new segment";
  EXPECT_EQ(ranges, 16);  // 8 forward + 8 backward layers
}

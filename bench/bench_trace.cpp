// Writing a trace: 100k activity records (kernels with their launches, copies, ranges and
// counters) to Chrome/Perfetto JSON, beside the floor of formatting the same numbers with
// snprintf into one string. Host-only: runs without a GPU.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>

#include "gpu_basics/profiler/activity.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"

namespace {
using namespace gpu_basics;

/// n events in all: n/2 GPU records (kernels and copies) and their n/2 launch calls.
activity_log records(std::size_t n) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::uint64_t> gap(500, 5000);
  activity_log log;
  std::uint64_t t = 1'000'000;
  for (std::uint32_t i = 0; i < n / 2; ++i) {
    const std::uint64_t launch = t;
    t += gap(rng);
    log.api_calls.push_back(
        {i % 4 ? "cudaLaunchKernel" : "cudaMemcpyAsync", launch, launch + 2000, 7, i + 1});
    if (i % 4) {
      kernel_record k;
      k.name = "void lcg_checksum_kernel<unsigned int>(const unsigned int*, unsigned long)";
      k.start_ns = t;
      k.end_ns = t + gap(rng);
      k.stream = 13 + i % 3;
      k.correlation = i + 1;
      k.grid[0] = 1056;
      k.block[0] = 256;
      k.registers_per_thread = 32;
      log.kernels.push_back(std::move(k));
    } else {
      memcpy_record m;
      m.kind = memcpy_kind::h2d;
      m.bytes = 1 << 20;
      m.start_ns = t;
      m.end_ns = t + gap(rng);
      m.stream = 13;
      m.correlation = i + 1;
      m.pinned = true;
      log.memcpys.push_back(m);
    }
  }
  return log;
}

void BM_TraceActivityToJsonText(benchmark::State& state) {
  const auto log = records(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    trace_writer w;
    add_activity(w, log, 0);
    const std::string text = w.to_string();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_TraceActivityOnly(benchmark::State& state) {
  const auto log = records(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    trace_writer w;
    add_activity(w, log, 0);
    benchmark::DoNotOptimize(w.size());
  }
}

// The floor: the same count of events, each a fixed-format snprintf of its numbers.
void BM_SnprintfFloor(benchmark::State& state) {
  const auto log = records(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::string out;
    out.reserve(static_cast<std::size_t>(state.range(0)) * 160);
    char buf[512];
    for (const auto& k : log.kernels) {
      const int len = std::snprintf(
          buf, sizeof buf,
          "{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,\"tid\":%u},\n",
          k.name.c_str(), static_cast<double>(k.start_ns) * 1e-3,
          static_cast<double>(k.end_ns - k.start_ns) * 1e-3, k.device, k.stream);
      out.append(buf, static_cast<std::size_t>(len));
    }
    for (const auto& a : log.api_calls) {
      const int len = std::snprintf(
          buf, sizeof buf,
          "{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%lu},\n",
          a.name.c_str(), static_cast<double>(a.start_ns) * 1e-3,
          static_cast<double>(a.end_ns - a.start_ns) * 1e-3, static_cast<unsigned long>(a.thread));
      out.append(buf, static_cast<std::size_t>(len));
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
}  // namespace

BENCHMARK(BM_TraceActivityToJsonText)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TraceActivityOnly)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnprintfFloor)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

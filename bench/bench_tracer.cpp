// What tracing costs a launch-bound loop: 2000 tiny kernel launches (and a synchronize)
// untraced, under a bare CUPTI subscriber that enables kernel + runtime records and discards
// them (CUPTI's own floor), and under gpu_basics' tracer (kernels, copies, memsets, runtime,
// synchronization; records kept). Needs a GPU; without one every case is skipped.
#include <benchmark/benchmark.h>

#include <cupti.h>

#include <atomic>
#include <cstdlib>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/profiler/activity_tracer.hpp"

cudaError_t launch_tiny_kernel(unsigned* counter, cudaStream_t s);

namespace {
using namespace gpu_basics;
constexpr int kLaunches = 2000;

std::atomic<std::uint64_t> bare_records{0};

void CUPTIAPI bare_request(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *size = 4u << 20;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI bare_complete(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                            std::size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::uint64_t n = 0;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) ++n;  // and discard
  bare_records += n;
  std::free(buffer);
}

enum mode : int { untraced = 0, bare_cupti = 1, gpu_basics_tracer = 2 };

void BM_TinyKernelLoop(benchmark::State& state) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const auto m = static_cast<mode>(state.range(0));
  cuda_stream s;
  device_buffer counter(sizeof(unsigned));
  GPU_BASICS_CUDA_TRY(cudaMemsetAsync(counter.data(), 0, sizeof(unsigned), s.value()));
  for (int i = 0; i < 100; ++i)
    (void)launch_tiny_kernel(counter.as<unsigned>(), s.value());  // warm
  s.synchronize();

  std::unique_ptr<activity_tracer> tracer;
  if (m == bare_cupti) {
    bare_records = 0;
    if (cuptiActivityRegisterCallbacks(bare_request, bare_complete) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) {
      state.SkipWithError("CUPTI unavailable");
      return;
    }
  } else if (m == gpu_basics_tracer) {
    std::string why;
    tracer = make_cupti_tracer(&why);
    if (!tracer) {
      state.SkipWithError(why.c_str());
      return;
    }
    tracer->start();
  }
  GPU_BASICS_CUDA_TRY(cudaMemsetAsync(counter.data(), 0, sizeof(unsigned), s.value()));
  std::uint64_t launched = 0;
  double enqueue_s = 0;
  for (auto _ : state) {
    const double t0 = host_seconds();
    for (int i = 0; i < kLaunches; ++i) (void)launch_tiny_kernel(counter.as<unsigned>(), s.value());
    enqueue_s += host_seconds() - t0;
    s.synchronize();
    launched += kLaunches;
  }
  unsigned ran = 0;
  GPU_BASICS_CUDA_TRY(cudaMemcpy(&ran, counter.data(), sizeof ran, cudaMemcpyDeviceToHost));
  std::uint64_t records = 0;
  if (m == bare_cupti) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    records = bare_records;
  } else if (tracer) {
    const activity_log log = tracer->stop();
    records = log.kernels.size() + log.api_calls.size() + log.syncs.size() + log.memsets.size();
    if (log.dropped_records) state.counters["dropped"] = static_cast<double>(log.dropped_records);
  }
  if (ran != static_cast<unsigned>(launched)) state.SkipWithError("a launch did not run");
  state.counters["us_per_launch"] = benchmark::Counter(
      static_cast<double>(launched), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // The CPU side alone: CUPTI's cost lands in the launch call (its API callback).
  state.counters["enqueue_us_per_launch"] =
      launched ? enqueue_s * 1e6 / static_cast<double>(launched) : 0.0;
  state.counters["records_per_launch"] =
      launched ? static_cast<double>(records) / static_cast<double>(launched) : 0.0;
  state.SetLabel(m == untraced     ? "untraced"
                 : m == bare_cupti ? "bare CUPTI (kernel+runtime, discarded)"
                                   : "gpu_basics tracer");
}
}  // namespace

BENCHMARK(BM_TinyKernelLoop)
    ->Arg(untraced)
    ->Arg(bare_cupti)
    ->Arg(gpu_basics_tracer)
    ->Iterations(25)
    ->Repetitions(10)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

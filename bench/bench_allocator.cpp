// The caching allocator's cost, beside its peers measured in the same run:
// - fake backend (any machine) beside glibc malloc+free;
// - CUDA backend (skipped without a GPU) beside cudaMalloc/cudaFree and cudaMallocAsync;
// - frugality on the fake backend: peak reserved / peak requested bytes of the synthetic traces
//   of replay.hpp under the default policy and with expandable segments (counters).
// PyTorch's c10 allocator, side by side with ours on the GPU, is bench_allocator_c10.cpp.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "per_thread.hpp"
#include "trace_loop.hpp"

using namespace gpu_basics;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

caching_allocator& fake_allocator() {
  static caching_allocator a(std::make_shared<fake_backend>(std::size_t{1} << 44, true));
  return a;
}

caching_allocator* cuda_allocator() {
  static std::unique_ptr<caching_allocator> a =
      have_gpu() ? std::make_unique<caching_allocator>(std::make_shared<cuda_device_backend>())
                 : nullptr;
  return a.get();
}

// ---- warm alloc + free pairs ---------------------------------------------------------------

void BM_CachingPair_Fake(benchmark::State& state) {
  auto& a = fake_allocator();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a.deallocate(a.allocate(bytes));  // warm: the segment is cached
  for (auto _ : state) {
    void* p = a.allocate(bytes);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
}

void BM_GlibcMallocFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(bytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}

void BM_CachingPair_Cuda(benchmark::State& state) {
  auto* a = cuda_allocator();
  if (!a) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a->deallocate(a->allocate(bytes));
  for (auto _ : state) {
    void* p = a->allocate(bytes);
    benchmark::DoNotOptimize(p);
    a->deallocate(p);
  }
}

void BM_CudaMallocFree(benchmark::State& state) {
  if (!have_gpu()) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) state.SkipWithError("cudaMalloc failed");
    benchmark::DoNotOptimize(p);
    cudaFree(p);
  }
}

void BM_CudaMallocAsyncPair(benchmark::State& state) {
  if (!have_gpu()) {
    state.SkipWithError("no GPU visible");
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void* w = nullptr;
  cudaMallocAsync(&w, bytes, s);  // warm the stream's pool
  cudaFreeAsync(w, s);
  cudaStreamSynchronize(s);
  for (auto _ : state) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) state.SkipWithError("cudaMallocAsync failed");
    benchmark::DoNotOptimize(p);
    cudaFreeAsync(p, s);
  }
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
}

// ---- the mixed trace of replay.hpp: up to 256 live blocks, sizes log-uniform 512 B - 32 MiB ----

template <class Alloc, class Free>
void run_trace(benchmark::State& state, Alloc alloc, Free release) {
  std::vector<void*> slots;
  bench::run_mixed_trace(state, slots, alloc, release);
}

void BM_MixedTrace_CachingFake(benchmark::State& state) {
  auto& a = fake_allocator();
  run_trace(
      state, [&](std::size_t n) { return a.allocate(n); }, [&](void* p) { a.deallocate(p); });
}
void BM_MixedTrace_Glibc(benchmark::State& state) {
  run_trace(
      state, [](std::size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
}
void BM_MixedTrace_CachingCuda(benchmark::State& state) {
  auto* a = cuda_allocator();
  if (!a) {
    state.SkipWithError("no GPU visible");
    return;
  }
  run_trace(
      state, [&](std::size_t n) { return a->allocate(n); }, [&](void* p) { a->deallocate(p); });
}
void BM_MixedTrace_CudaMallocAsync(benchmark::State& state) {
  if (!have_gpu()) {
    state.SkipWithError("no GPU visible");
    return;
  }
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  run_trace(
      state,
      [&](std::size_t n) {
        void* p = nullptr;
        cudaMallocAsync(&p, n, s);
        return p;
      },
      [&](void* p) { cudaFreeAsync(p, s); });
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
}

// ---- 8 threads: each on its own stream, warm pairs -------------------------------------------

void BM_CachingPair_Fake_Threads(benchmark::State& state) {
  auto& a = fake_allocator();
  const auto stream = static_cast<stream_handle>(state.thread_index() + 1);
  a.deallocate(a.allocate(1 << 20, stream));
  const bench::per_thread_latency clock;
  for (auto _ : state) {
    void* p = a.allocate(1 << 20, stream);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  clock.report(state);
}
// 8 threads on one stream: every pair contends for the same stream's pool (PyTorch's common case:
// data-loader and autograd threads on the current stream).
void BM_CachingPair_Fake_OneStream_Threads(benchmark::State& state) {
  auto& a = fake_allocator();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a.deallocate(a.allocate(bytes, 0));
  const bench::per_thread_latency clock;
  for (auto _ : state) {
    void* p = a.allocate(bytes, 0);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  clock.report(state);
}
void BM_GlibcMallocFree_Threads(benchmark::State& state) {
  const bench::per_thread_latency clock;
  for (auto _ : state) {
    void* p = std::malloc(1 << 20);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  clock.report(state);
}

// ---- frees from another thread (PyTorch's autograd thread freeing the forward pass's tensors) --

/// A thread that runs one job at a time for the benchmark's thread, which waits for it.
class helper_thread {
 public:
  helper_thread() : t_([this] { loop(); }) {}
  ~helper_thread() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  void run(std::function<void()> job) {
    std::unique_lock lock(m_);
    job_ = std::move(job);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !job_; });
  }

 private:
  void loop() {
    std::unique_lock lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || job_; });
      if (stop_) return;
      job_();
      job_ = nullptr;
      cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool stop_ = false;
  std::thread t_;
};

/// 256 blocks of range(0) bytes allocated by the benchmark's thread, freed by `freer` (the same
/// thread, or a helper): the time per block of the allocation and the free.
void free_batch(benchmark::State& state, bool other_thread) {
  auto& a = fake_allocator();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kBlocks = 256;
  std::vector<void*> ptrs(kBlocks);
  helper_thread helper;
  const auto free_all = [&] {
    for (void* p : ptrs) a.deallocate(p);
  };
  for (auto _ : state) {
    for (auto& p : ptrs) p = a.allocate(bytes, 9);
    if (other_thread)
      helper.run(free_all);
    else
      free_all();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kBlocks));
}
void BM_CachingBatch_FreedByOwner_Fake(benchmark::State& state) {
  free_batch(state, false);
}
void BM_CachingBatch_FreedByAnotherThread_Fake(benchmark::State& state) {
  free_batch(state, true);
}

// ---- frugality: what a policy reserves for a trace, on the fake backend ------------------------

// range(0): 0 mixed_trace(), 1 transformer_trace(); range(1): 1 with expandable segments.
void BM_Frugality_Fake(benchmark::State& state) {
  static const std::vector<replay_event> traces[] = {gpu_basics::mixed_trace(),
                                                     gpu_basics::transformer_trace()};
  const auto& trace = traces[state.range(0)];
  allocator_options o;
  o.expandable_segments = state.range(1) != 0;
  state.SetLabel(std::string(state.range(0) == 0 ? "mixed" : "transformer") +
                 (o.expandable_segments ? " expandable_segments" : " defaults"));
  replay_result r;
  for (auto _ : state) r = replay_trace(trace, o);
  constexpr double kMiB = 1 << 20;
  state.counters["peak_reserved_MiB"] = static_cast<double>(r.peak_reserved) / kMiB;
  state.counters["peak_requested_MiB"] = static_cast<double>(r.peak_requested) / kMiB;
  state.counters["reserved_per_requested"] = r.reserved_ratio();
  state.counters["backend_allocations"] = static_cast<double>(r.backend_allocations);
  state.counters["fragmentation_at_peak"] = r.fragmentation_at_peak;
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.size()));
}

}  // namespace

BENCHMARK(BM_CachingPair_Fake)->Arg(512)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_GlibcMallocFree)->Arg(512)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_CachingPair_Cuda)->Arg(512)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_CudaMallocAsyncPair)->Arg(512)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_CudaMallocFree)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Iterations(200);
BENCHMARK(BM_MixedTrace_CachingFake);
BENCHMARK(BM_MixedTrace_Glibc);
BENCHMARK(BM_MixedTrace_CachingCuda);
BENCHMARK(BM_MixedTrace_CudaMallocAsync);
BENCHMARK(BM_CachingPair_Fake_Threads)->Threads(8);
BENCHMARK(BM_GlibcMallocFree_Threads)->Threads(8);
BENCHMARK(BM_CachingPair_Fake_OneStream_Threads)->Arg(512)->Arg(1 << 20)->Threads(8);
BENCHMARK(BM_CachingBatch_FreedByOwner_Fake)->Arg(512)->Arg(64 << 10);
BENCHMARK(BM_CachingBatch_FreedByAnotherThread_Fake)->Arg(512)->Arg(64 << 10);
BENCHMARK(BM_Frugality_Fake)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"trace", "expandable"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

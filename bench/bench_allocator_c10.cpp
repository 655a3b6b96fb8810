// Our caching allocator beside PyTorch's (c10::cuda::CUDACachingAllocator), in one process, on
// the real GPU. Built only where PyTorch's libc10 / libc10_cuda and headers are found
// (GPU_BASICS_TORCH_DIR, cmake/torch.cmake).
//
// Speed (Google Benchmark): warm alloc + free pairs of 512 B and 1 MiB on 1 thread, on 8 threads
// sharing one stream and on 8 threads with a stream each (streams created once), and the mixed
// trace of replay.hpp in ns per operation; ours with the default policy and with
// expandable_segments, c10 with the policy PYTORCH_CUDA_ALLOC_CONF gives it (named in the label).
//
// Frugality (a table after the benchmarks): each trace (mixed_trace(), transformer_trace(), and
// every --trace FILE) replayed on the GPU through c10 (raw_alloc_with_stream / raw_delete; its
// cache emptied and its peaks reset before each) and through a fresh allocator of ours; peak
// reserved bytes (reserved_bytes peak of getDeviceStats for c10, stats() for ours) over the
// trace's own peak of live requested bytes. c10 runs with and without expandable segments,
// switched in-process with setAllocatorSettings (checked afterwards: if the switch did not take,
// the row says so and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on a second run is the way).
//
//   gpu_basics_bench_allocator_c10 [--trace FILE]... [benchmark flags]
//
// A trace file: one event per line, `a ID BYTES STREAM` (allocate BYTES as block ID on stream
// number STREAM, 0 = the default stream) or `f ID` (free block ID); `#` starts a comment. A program
// reads a PyTorch memory snapshot (a path ending in .pickle) through snapshot/snapshot.hpp, and its
// own formats instead.
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#define GPU_BASICS_C10_GENERIC_CONFIG 1
#else
#define GPU_BASICS_C10_GENERIC_CONFIG 0
#endif

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/snapshot/replay.hpp"

#include "gpu_basics/snapshot/snapshot.hpp"
#include "per_thread.hpp"
#include "trace_loop.hpp"

using namespace gpu_basics;

namespace {

namespace c10a = c10::cuda::CUDACachingAllocator;

constexpr int kThreads = 8;
constexpr double kMiB = 1 << 20;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// kThreads non-blocking streams on device 0, created once (before the benchmarks run).
std::vector<cudaStream_t>& streams() {
  static std::vector<cudaStream_t> s;
  return s;
}

bool c10_expandable() {
  return c10a::CUDAAllocatorConfig::expandable_segments();
}

std::string c10_label() {
  return c10_expandable() ? "c10 expandable_segments" : "c10 defaults";
}

/// Sets c10's allocator settings in-process (PyTorch's _set_allocator_settings).
void c10_settings(const std::string& conf) {
#if GPU_BASICS_C10_GENERIC_CONFIG
  c10::CachingAllocator::setAllocatorSettings(conf);
#else
  c10a::setAllocatorSettings(conf);
#endif
}

void c10_init() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return;
  if (!c10a::get()->initialized()) c10a::init(n);
}

// ---- the allocators ---------------------------------------------------------------------------

caching_allocator* ours(bool expandable) {
  static std::unique_ptr<caching_allocator> a[2];
  if (!have_gpu()) return nullptr;
  static std::once_flag once[2];
  std::call_once(once[expandable], [&] {
    allocator_options o;
    o.expandable_segments = expandable;
    a[expandable] = std::make_unique<caching_allocator>(std::make_shared<cuda_device_backend>(), o);
  });
  return a[expandable].get();
}

struct ours_ops {
  caching_allocator* a;
  void* alloc(std::size_t n, cudaStream_t s) {
    return a->allocate(n, reinterpret_cast<stream_handle>(s));
  }
  void free(void* p) { a->deallocate(p); }
};

struct c10_ops {
  void* alloc(std::size_t n, cudaStream_t s) { return c10a::raw_alloc_with_stream(n, s); }
  void free(void* p) { c10a::raw_delete(p); }
};

// ---- warm pairs -------------------------------------------------------------------------------

enum class stream_use { one, per_thread };

template <class Ops>
void pair(benchmark::State& state, Ops ops, stream_use use) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const cudaStream_t s =
      streams()[use == stream_use::one ? 0 : static_cast<std::size_t>(state.thread_index())];
  try {
    ops.free(ops.alloc(bytes, s));  // warm: the block is cached
    const bench::per_thread_latency clock;
    for (auto _ : state) {
      void* p = ops.alloc(bytes, s);
      benchmark::DoNotOptimize(p);
      ops.free(p);
    }
    clock.report(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_Pair_Ours(benchmark::State& state, bool expandable, stream_use use) {
  caching_allocator* a = ours(expandable);
  if (!a) return state.SkipWithError("no GPU visible");
  state.SetLabel(expandable ? "ours expandable_segments" : "ours defaults");
  pair(state, ours_ops{a}, use);
}

void BM_Pair_C10(benchmark::State& state, stream_use use) {
  if (!have_gpu()) return state.SkipWithError("no GPU visible");
  state.SetLabel(c10_label());
  pair(state, c10_ops{}, use);
}

// ---- the mixed trace --------------------------------------------------------------------------

template <class Ops>
void mixed(benchmark::State& state, Ops ops) {
  std::vector<void*> slots;
  const cudaStream_t s = streams()[0];
  try {
    bench::run_mixed_trace(
        state, slots, [&](std::size_t n) { return ops.alloc(n, s); },
        [&](void* p) { ops.free(p); });
  } catch (const std::exception& e) {
    for (void*& p : slots)
      if (p) ops.free(std::exchange(p, nullptr));
    return state.SkipWithError(e.what());
  }
}

void BM_MixedTrace_Ours(benchmark::State& state, bool expandable) {
  caching_allocator* a = ours(expandable);
  if (!a) return state.SkipWithError("no GPU visible");
  state.SetLabel(expandable ? "ours expandable_segments" : "ours defaults");
  mixed(state, ours_ops{a});
}

void BM_MixedTrace_C10(benchmark::State& state) {
  if (!have_gpu()) return state.SkipWithError("no GPU visible");
  state.SetLabel(c10_label());
  mixed(state, c10_ops{});
}

void register_benchmarks() {
  const std::pair<const char*, stream_use> uses[] = {{"OneStream", stream_use::one},
                                                     {"StreamPerThread", stream_use::per_thread}};
  for (const bool expandable : {false, true}) {
    const std::string name = expandable ? "BM_Pair_OursExpandable" : "BM_Pair_Ours";
    benchmark::RegisterBenchmark(name.c_str(), BM_Pair_Ours, expandable, stream_use::one)
        ->Arg(512)
        ->Arg(1 << 20);
    for (const auto& [tag, use] : uses)
      benchmark::RegisterBenchmark((name + "_" + tag).c_str(), BM_Pair_Ours, expandable, use)
          ->Arg(512)
          ->Arg(1 << 20)
          ->Threads(kThreads);
  }
  benchmark::RegisterBenchmark("BM_Pair_C10", BM_Pair_C10, stream_use::one)->Arg(512)->Arg(1 << 20);
  for (const auto& [tag, use] : uses)
    benchmark::RegisterBenchmark((std::string("BM_Pair_C10_") + tag).c_str(), BM_Pair_C10, use)
        ->Arg(512)
        ->Arg(1 << 20)
        ->Threads(kThreads);
  benchmark::RegisterBenchmark("BM_MixedTrace_Ours", BM_MixedTrace_Ours, false);
  benchmark::RegisterBenchmark("BM_MixedTrace_OursExpandable", BM_MixedTrace_Ours, true);
  benchmark::RegisterBenchmark("BM_MixedTrace_C10", BM_MixedTrace_C10);
}

// ---- frugality --------------------------------------------------------------------------------

struct named_trace {
  std::string name;
  std::vector<replay_event> events;
};

/// Reads `a ID BYTES STREAM` / `f ID` lines.
/// @throws std::runtime_error naming the file and line of anything else.
std::vector<replay_event> read_text_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<replay_event> v;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string op;
    if (!(ls >> op)) continue;
    replay_event e;
    bool ok = false;
    if (op == "a") {
      std::uint64_t stream = 0;
      ok = static_cast<bool>(ls >> e.id >> e.bytes >> stream);
      e.kind = replay_event::op::alloc;
      e.stream = static_cast<stream_handle>(stream);
    } else if (op == "f") {
      ok = static_cast<bool>(ls >> e.id);
      e.kind = replay_event::op::free;
    }
    std::string rest;
    if (!ok || (ls >> rest))
      throw std::runtime_error(path + ":" + std::to_string(n) +
                               ": expected `a ID BYTES STREAM` or `f ID`, got '" + line + "'");
    v.push_back(e);
  }
  return v;
}

struct replay_outcome {
  std::size_t peak_reserved = 0;
  std::size_t peak_requested = 0;
  std::size_t skipped_frees = 0;
  std::string error;  // empty when the replay finished
};

/// Replays `trace` on the GPU: trace stream 0 is the legacy default stream, others get a stream
/// each. Returns the trace's peak of live requested bytes; `reserved` is read by the caller.
template <class Ops>
replay_outcome replay_on_gpu(const std::vector<replay_event>& trace, Ops ops) {
  replay_outcome r;
  std::map<stream_handle, cudaStream_t> stream_of;
  std::unordered_map<std::uint64_t, std::pair<void*, std::size_t>> live;
  std::size_t requested = 0;
  try {
    for (const replay_event& e : trace) {
      if (e.kind == replay_event::op::alloc) {
        auto [it, fresh] = stream_of.try_emplace(e.stream, nullptr);
        if (fresh && e.stream != 0 &&
            cudaStreamCreateWithFlags(&it->second, cudaStreamNonBlocking) != cudaSuccess)
          throw std::runtime_error("cudaStreamCreate failed");
        void* p = ops.alloc(e.bytes, it->second);
        auto [l, added] = live.try_emplace(e.id, p, e.bytes);
        if (!added) {  // an id allocated twice: the first block leaks, as recorded
          requested -= l->second.second;
          l->second = {p, e.bytes};
        }
        requested += e.bytes;
        r.peak_requested = std::max(r.peak_requested, requested);
      } else {
        const auto it = live.find(e.id);
        if (it == live.end()) {
          ++r.skipped_frees;
          continue;
        }
        ops.free(it->second.first);
        requested -= it->second.second;
        live.erase(it);
      }
    }
  } catch (const std::exception& x) {
    r.error = x.what();
  }
  for (auto& [id, pb] : live) ops.free(pb.first);
  cudaDeviceSynchronize();
  for (auto& [id, s] : stream_of)
    if (s) cudaStreamDestroy(s);
  return r;
}

struct table_row {
  std::string trace, allocator;
  replay_outcome r;
};

table_row frugality_ours(const named_trace& t, bool expandable) {
  allocator_options o;
  o.expandable_segments = expandable;
  auto backend = std::make_shared<cuda_device_backend>();
  const bool vm = backend->supports_virtual_memory();
  caching_allocator a(backend, o);
  table_row row{t.name,
                std::string("ours ") + (expandable ? "expandable_segments" : "defaults") +
                    (expandable && !vm ? " (backend without virtual memory: plain segments)" : ""),
                replay_on_gpu(t.events, ours_ops{&a})};
  row.r.peak_reserved = static_cast<std::size_t>(a.stats().reserved_bytes.peak);
  (void)a.empty_cache();
  return row;
}

table_row frugality_c10(const named_trace& t, bool want_expandable) {
  const int device = 0;
  c10a::emptyCache();
  c10a::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  table_row row{t.name, c10_label(), replay_on_gpu(t.events, c10_ops{})};
  if (c10_expandable() != want_expandable)
    row.allocator += " (asked for " +
                     std::string(want_expandable ? "expandable_segments" : "defaults") +
                     ": setAllocatorSettings did not take; use PYTORCH_CUDA_ALLOC_CONF)";
  const auto stats = c10a::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  row.r.peak_reserved = static_cast<std::size_t>(stats.reserved_bytes[0].peak);  // 0: all pools
  c10a::emptyCache();
  return row;
}

void frugality_table(const std::vector<named_trace>& traces) {
  // The benchmarks' allocators give their cache back first.
  for (const bool e : {false, true})
    if (caching_allocator* a = ours(e)) (void)a->empty_cache();
  c10a::emptyCache();

  const bool c10_started_expandable = c10_expandable();
  std::vector<table_row> rows;
  for (const named_trace& t : traces) {
    rows.push_back(frugality_ours(t, false));
    rows.push_back(frugality_ours(t, true));
    for (const bool e : {false, true}) {
      try {
        c10_settings(e ? "expandable_segments:True" : "expandable_segments:False");
      } catch (const std::exception& x) {
        std::fprintf(stderr, "c10 setAllocatorSettings: %s\n", x.what());
      }
      rows.push_back(frugality_c10(t, e));
    }
  }
  try {
    c10_settings(c10_started_expandable ? "expandable_segments:True" : "expandable_segments:False");
  } catch (const std::exception&) {
  }

  std::printf(
      "\nFrugality on the GPU: peak reserved / peak live requested bytes (same trace, same "
      "process)\n");
  std::printf("%-24s %-44s %12s %14s %9s %9s  %s\n", "trace", "allocator", "events",
              "requested MiB", "reserved MiB", "ratio", "notes");
  for (const table_row& row : rows) {
    const double req = static_cast<double>(row.r.peak_requested);
    std::string notes = row.r.error.empty() ? "" : "FAILED: " + row.r.error;
    if (row.r.skipped_frees)
      notes += (notes.empty() ? "" : "; ") + std::to_string(row.r.skipped_frees) +
               " frees of unknown ids skipped";
    std::size_t events = 0;
    for (const named_trace& t : traces)
      if (t.name == row.trace) events = t.events.size();
    std::printf("%-24s %-44s %12zu %14.1f %12.1f %9.3f  %s\n", row.trace.c_str(),
                row.allocator.c_str(), events, req / kMiB,
                static_cast<double>(row.r.peak_reserved) / kMiB,
                req > 0 ? static_cast<double>(row.r.peak_reserved) / req : 0.0, notes.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<named_trace> traces = {{"mixed", mixed_trace()},
                                     {"transformer", transformer_trace()}};
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string path;
    if (arg == "--trace" && i + 1 < argc) {
      path = argv[++i];
    } else if (arg.rfind("--trace=", 0) == 0) {
      path = arg.substr(8);
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    try {
      if (path.size() > 7 && path.substr(path.size() - 7) == ".pickle") {
        // A PyTorch memory snapshot: the device with the most events.
        const torch_snapshot snap = read_torch_snapshot(path);
        traces.push_back({path, to_replay_trace(snap, snap.busiest_device())});
      } else {
        traces.push_back({path, read_text_trace(path)});
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_basics_bench_allocator_c10: %s\n", e.what());
      return 2;
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  if (!have_gpu()) {
    std::fprintf(stderr, "gpu_basics_bench_allocator_c10: no GPU visible\n");
    return 3;
  }
  try {
    c10_init();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10 allocator init failed: %s\n", e.what());
    return 1;
  }
  for (int i = 0; i < kThreads; ++i) {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      std::fprintf(stderr, "cudaStreamCreate failed\n");
      return 1;
    }
    streams().push_back(s);
  }
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  frugality_table(traces);
  return 0;
}

// `gpu-basics memory`: device allocation, the caching allocator, empty_cache, peak memory,
// pinned vs pageable host memory and fragmentation, measured on the GPU and explained.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/memory/pinned_pool.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "lesson.hpp"
#include "trace_output.hpp"

namespace gpu_basics::cli {

namespace {

constexpr std::size_t MiB = 1 << 20;
constexpr double kMiB = 1.0 / (1 << 20);

template <class F>
double median_seconds(int iterations, F f) {
  std::vector<double> t;
  for (int i = 0; i < iterations; ++i) {
    const double t0 = host_seconds();
    f();
    t.push_back(host_seconds() - t0);
  }
  return summarize(t).median;
}

void log_allocation(const alloc_trace& t) {
  spdlog::debug("alloc {} B -> {} B, {} pool, stream {:#x}, {}; allocated {:.1f} MiB, reserved {:.1f} MiB",
                t.requested, t.rounded, t.small_pool ? "small" : "large", t.stream, to_string(t.source),
                static_cast<double>(t.allocated_after) * kMiB, static_cast<double>(t.reserved_after) * kMiB);
}

std::unique_ptr<caching_allocator> make_allocator(allocator_options o = {}) {
  auto a = std::make_unique<caching_allocator>(std::make_shared<cuda_device_backend>(), o);
  a->set_trace_callback(log_allocation);
  return a;
}

}  // namespace

report run_memory(context& ctx) {
  const config& cfg = ctx.cfg;
  const int iters = cfg.benchmark.iterations;
  report r;
  r.command = "memory";
  cuda_stream stream;
  const auto sh = reinterpret_cast<stream_handle>(stream.value());

  // ---- 1. what an allocation costs ---------------------------------------------------------
  {
    table t;
    t.id = "allocation_cost";
    t.title = "What one allocation + free costs (host clock, median)";
    t.columns = {{"bytes", "size"},
                 {"cuda_malloc_s", "cudaMalloc (us)", 1e6, 1},
                 {"cuda_free_s", "cudaFree (us)", 1e6, 1},
                 {"malloc_async_pair_s", "cudaMallocAsync+Free (us)", 1e6, 2},
                 {"cached_pair_s", "caching allocator hit (us)", 1e6, 3},
                 {"speedup_vs_cuda_malloc", "x vs cudaMalloc+Free", 1.0, 0},
                 {"speedup_vs_malloc_async", "x vs MallocAsync", 1.0, 1}};
    auto alloc = make_allocator();
    alloc->set_trace_callback(nullptr);  // the timed loops stay out of the debug log
    for (std::size_t bytes : {std::size_t{512}, 1 * MiB, 64 * MiB, 1024 * MiB}) {
      std::vector<double> m, f;
      for (int i = 0; i < cfg.benchmark.warmup_iterations + iters; ++i) {
        void* p = nullptr;
        const double t0 = host_seconds();
        GPU_BASICS_CUDA_TRY(cudaMalloc(&p, bytes));
        const double t1 = host_seconds();
        GPU_BASICS_CUDA_TRY(cudaFree(p));
        const double t2 = host_seconds();
        if (i >= cfg.benchmark.warmup_iterations) {
          m.push_back(t1 - t0);
          f.push_back(t2 - t1);
        }
      }
      void* w = nullptr;
      GPU_BASICS_CUDA_TRY(cudaMallocAsync(&w, bytes, stream.value()));
      GPU_BASICS_CUDA_TRY(cudaFreeAsync(w, stream.value()));
      stream.synchronize();
      constexpr int pairs = 1000;
      const double async_pair = median_seconds(iters, [&] {
        for (int i = 0; i < pairs; ++i) {
          void* p = nullptr;
          GPU_BASICS_CUDA_TRY(cudaMallocAsync(&p, bytes, stream.value()));
          GPU_BASICS_CUDA_TRY(cudaFreeAsync(p, stream.value()));
        }
      }) / pairs;
      stream.synchronize();
      alloc->deallocate(alloc->allocate(bytes, sh));
      const double cached_pair = median_seconds(iters, [&] {
        for (int i = 0; i < pairs; ++i) alloc->deallocate(alloc->allocate(bytes, sh));
      }) / pairs;
      const double raw = summarize(m).median + summarize(f).median;
      t.add_row({format_bytes(bytes), summarize(m).median, summarize(f).median, async_pair, cached_pair,
                 raw / cached_pair, async_pair / cached_pair});
    }
    t.notes.push_back(
        "- cudaMalloc and cudaFree go to the driver: it finds physical pages, maps them into the "
        "GPU's address space and, for cudaFree, synchronizes the device. That costs tens of "
        "microseconds to milliseconds, and cudaFree stalls every stream.");
    t.notes.push_back(
        "- A caching allocator (PyTorch's, or gpu_basics::caching_allocator) keeps freed blocks and "
        "hands them out again: a cache hit is host bookkeeping only, tens of nanoseconds. "
        "cudaMallocAsync is the driver's own stream-ordered pool; faster than cudaMalloc, slower "
        "than a host-side cache.");
    r.tables.push_back(std::move(t));
  }

  // ---- 2. allocate, free, allocate again, empty_cache --------------------------------------
  {
    auto alloc = make_allocator();
    table t;
    t.id = "caching";
    t.title = "Allocate, free, allocate again, empty_cache (4 x 256 MiB)";
    t.columns = {{"step", "step"},
                 {"allocated_bytes", "allocated (MiB)", kMiB, 0},
                 {"reserved_bytes", "reserved (MiB)", kMiB, 0},
                 {"device_allocations", "cudaMalloc calls", 1.0, 0},
                 {"step_s", "time (us)", 1e6, 1}};
    const auto row = [&](std::string step, double seconds) {
      const auto s = alloc->stats();
      t.add_row({std::move(step), s.allocated_bytes.current, s.reserved_bytes.current,
                 s.device_allocations, seconds});
    };
    std::vector<void*> blocks(4);
    double t0 = host_seconds();
    for (auto& p : blocks) p = alloc->allocate(256 * MiB, sh);
    row("allocate 4 x 256 MiB (cold)", host_seconds() - t0);
    t0 = host_seconds();
    for (auto p : blocks) alloc->deallocate(p);
    row("free all four", host_seconds() - t0);
    t0 = host_seconds();
    for (auto& p : blocks) p = alloc->allocate(256 * MiB, sh);
    row("allocate 4 x 256 MiB again (cache hits)", host_seconds() - t0);
    for (auto p : blocks) alloc->deallocate(p);
    t0 = host_seconds();
    const auto ec = alloc->empty_cache();
    row("free all, then empty_cache()", host_seconds() - t0);
    t0 = host_seconds();
    void* again = alloc->allocate(256 * MiB, sh);
    row("allocate 256 MiB after empty_cache", host_seconds() - t0);
    alloc->deallocate(again);
    t.notes.push_back(
        "- 'allocated' counts blocks handed out; 'reserved' what the allocator holds from the driver. "
        "After the free, allocated drops to 0 but reserved stays: the memory is cached, which is "
        "why nvidia-smi shows a PyTorch process holding memory it no longer uses.");
    t.notes.push_back(fmt::format(
        "- empty_cache() released {} segment(s) ({:.0f} MiB) and kept {} ({} in use, {} waiting on "
        "other streams). It gives memory back to other processes, at the price of paying "
        "cudaMalloc again on the next allocation.",
        ec.released_segments, static_cast<double>(ec.released_bytes) * kMiB,
        ec.kept_in_use_segments + ec.kept_pending_segments, ec.kept_in_use_segments,
        ec.kept_pending_segments));
    r.extra["empty_cache"] = ec;
    r.tables.push_back(std::move(t));
  }

  // ---- 3. peak memory of a workload ---------------------------------------------------------
  {
    // --trace: this pass, with the allocator's allocated/reserved bytes as counter tracks.
    allocator_options ho;
    if (ctx.trace_path) ho.history_capacity = 4096;
    auto alloc = make_allocator(ho);
    auto trace = start_trace(ctx, trace_schedule{0, 0, 0});
    if (trace) trace->step();
    table t;
    t.id = "peak";
    t.title = "Peak memory of a workload (reset_peak_stats, then a forward/backward-like pass)";
    t.columns = {{"quantity", "quantity"}, {"bytes", "MiB", kMiB, 1}};
    void* weights = alloc->allocate(512 * MiB, sh);
    alloc->reset_peak_stats();
    // Forward: 8 layers keep their activations; backward frees them in reverse, with a gradient
    // buffer alive per layer.
    std::vector<void*> acts;
    std::uint64_t asked = 0;
    for (int l = 0; l < 8; ++l) {
      scoped_range range(fmt::format("forward layer {}", l));
      const std::size_t n = (64 + 16 * static_cast<std::size_t>(l)) * MiB;
      acts.push_back(alloc->allocate(n, sh));
      asked += n;
    }
    for (int l = 7; l >= 0; --l) {
      scoped_range range(fmt::format("backward layer {}", l));
      void* grad = alloc->allocate(64 * MiB, sh);
      asked += 64 * MiB;
      alloc->deallocate(acts[static_cast<std::size_t>(l)]);
      alloc->deallocate(grad);
    }
    const auto s = alloc->stats();
    t.add_row({std::string("allocated before the pass (weights)"), std::int64_t{512 * MiB}});
    t.add_row({std::string("peak allocated during the pass"), s.allocated_bytes.peak});
    t.add_row({std::string("peak reserved during the pass"), s.reserved_bytes.peak});
    t.add_row({std::string("sum of all allocations in the pass"), static_cast<std::int64_t>(asked)});
    t.notes.push_back(
        "- The peak is what must fit on the GPU: here all activations of the forward pass alive at "
        "once plus one gradient, not the sum of every allocation. reset_peak_stats() scopes the "
        "peak to the part of the program you care about.");
    alloc->deallocate(weights);
    r.extra["peak_stats"] = s;
    r.tables.push_back(std::move(t));
    if (trace) {
      const auto h = alloc->history();
      write_trace(ctx, *trace, r, nullptr, &h);
    }
  }

  // ---- 4. pinned vs pageable host memory ----------------------------------------------------
  {
    const std::uint64_t bytes = *shape_bytes(cfg.transfer.tensor_shapes.back(), cfg.transfer.element_type);
    table t;
    t.id = "pinned_vs_pageable";
    t.title = fmt::format("Host memory for a {} tensor: pinned vs pageable", format_bytes(bytes));
    t.columns = {{"memory", "host memory"},
                 {"allocate_s", "allocate (ms)", 1e3, 2},
                 {"reuse_s", "reuse from pool (us)", 1e6, 2},
                 {"h2d_bytes_per_s", "H2D GB/s", 1e-9, 1}};
    copy_bench bench({cfg.benchmark.warmup_iterations, std::min(iters, 10)});
    {
      const double a = median_seconds(3, [&] {
        void* p = std::malloc(bytes);
        if (!p) throw out_of_memory("cannot allocate " + format_bytes(bytes) + " of host memory", bytes);
        std::memset(p, 1, bytes);  // malloc maps pages lazily: touching them is part of the cost
        std::free(p);
      });
      const auto c = bench.copy(copy_direction::h2d, host_memory::pageable, bytes);
      t.add_row({std::string("pageable (malloc + first touch)"), a, std::monostate{},
                 c.bandwidth_bytes_per_s.median});
    }
    if (cfg.memory.use_pinned_memory) {
      const double a = median_seconds(3, [&] { pinned_buffer p(bytes); });
      pinned_host_pool pool(std::make_shared<cuda_pinned_backend>());
      pool.deallocate(pool.allocate(bytes));
      const double reuse = median_seconds(iters, [&] { pool.deallocate(pool.allocate(bytes)); });
      const auto c = bench.copy(copy_direction::h2d, host_memory::pinned, bytes);
      t.add_row({std::string("pinned (cudaHostAlloc)"), a, reuse, c.bandwidth_bytes_per_s.median});
      r.extra["pinned_pool"] = pool.stats();
      t.notes.push_back(
          "- Pinning is expensive: the OS must fault in and lock every page and the driver must map "
          "them for the GPU. A pinned pool (gpu_basics::pinned_host_pool) pays that once and reuses "
          "the block.");
      t.notes.push_back(
          "- The copy engine reads pinned memory directly (DMA). From pageable memory the driver "
          "first copies through its own pinned staging buffer with the CPU, so H2D runs several "
          "times slower.");
    } else {
      t.notes.push_back("- memory.use_pinned_memory is false: only pageable memory is measured.");
    }
    r.tables.push_back(std::move(t));
  }

  // ---- 5. fragmentation and max_split_size ---------------------------------------------------
  {
    table t;
    t.id = "fragmentation";
    t.title = "Fragmentation: a cached 64 MiB block, 2 MiB requests, then 64 MiB again";
    t.columns = {{"max_split_size", "max_split_size"},
                 {"fragmentation", "fragmentation %", 100.0, 1},
                 {"largest_free_bytes", "largest free (MiB)", kMiB, 0},
                 {"reserved_bytes", "reserved after (MiB)", kMiB, 0},
                 {"second_64mib", "second 64 MiB from"}};
    for (std::size_t limit : {SIZE_MAX, 32 * MiB}) {
      allocator_options o;
      o.max_split_size = limit;
      auto alloc = make_allocator(o);
      alloc->deallocate(alloc->allocate(64 * MiB, sh));  // cached 64 MiB block
      std::vector<void*> small;
      for (int i = 0; i < 8; ++i) small.push_back(alloc->allocate(2 * MiB, sh));
      for (std::size_t i = 0; i < small.size(); i += 2) alloc->deallocate(small[i]);  // holes
      const auto before = alloc->stats();
      const auto seg_before = before.device_allocations;
      void* big = alloc->allocate(64 * MiB, sh);
      const auto after = alloc->stats();
      t.add_row({limit == SIZE_MAX ? std::string("unlimited") : format_bytes(limit), before.fragmentation,
                 static_cast<std::int64_t>(before.largest_free_block), after.reserved_bytes.current,
                 std::string(after.device_allocations > seg_before ? "a new segment (cudaMalloc)" : "the cache")});
      alloc->deallocate(big);
      for (std::size_t i = 1; i < small.size(); i += 2) alloc->deallocate(small[i]);
    }
    t.notes.push_back(
        "- fragmentation = 1 - largest free block / all free bytes: free memory in pieces too small "
        "for the next request. Without a limit the 2 MiB requests are carved out of the cached "
        "64 MiB block; freeing every other one leaves holes, the next 64 MiB request does not fit "
        "in any of them, and a new segment is reserved.");
    t.notes.push_back(
        "- With max_split_size = 32 MiB, blocks that large are never split for small requests: the "
        "2 MiB requests get their own segments and the 64 MiB block stays whole for the next large "
        "request (PyTorch: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb).");
    r.tables.push_back(std::move(t));
  }
  return r;
}

}  // namespace gpu_basics::cli

// The memory lesson's measurements on the GPU: allocation cost, the caching allocator's cache and
// empty_cache, the peak of a forward/backward-like pass (traced with --trace), pinned vs pageable
// host memory, fragmentation with and without max_split_size. No printing.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/sampling_sides.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/memory/pinned_pool.hpp"
#include "gpu_basics/profiler/range.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"

namespace gpu_basics::lessons {

namespace {

constexpr std::size_t MiB = 1 << 20;

constexpr int kPairsPerSample = 1000;  // allocate + free pairs timed together
constexpr int kCachingBlocks = 4;
constexpr std::size_t kCachingBlockBytes = 256 * MiB;
constexpr std::size_t kWeightsBytes = 512 * MiB;
constexpr int kLayers = 8;
constexpr std::size_t kGradientBytes = 64 * MiB;
constexpr int kHostAllocateRepetitions = 3;
constexpr int kMaxCopyIterations = 10;
constexpr std::size_t kLargeBytes = 64 * MiB;
constexpr std::size_t kSmallBytes = 2 * MiB;
constexpr int kSmallRequests = 8;
constexpr std::size_t kLimitedSplitBytes = 32 * MiB;

/// Counts the lesson's parts done, for ctx.report_progress.
struct progress_counter {
  const context& ctx;
  int total;
  int done = 0;
  void step(const std::string& item) { ctx.report_progress(item, ++done, total); }
};

/// The median time of f() sampled by `rule` (core/sampling.hpp), without its warm-up: a first
/// call here is part of what is measured (a host allocation's page faults) or was made already.
template <class F>
double median_seconds(stopping_rule rule, F f) {
  rule = without_warmup(rule);
  std::vector<double> t;
  (void)sample_each(rule, t, [&] {
    const double t0 = host_seconds();
    f();
    return host_seconds() - t0;
  });
  return summarize(t).median;
}

/// Tells the compiler that the memory behind `p` is read here, so the writes before it (a
/// memset into memory freed right after) are not dropped as dead stores. An empty asm with a
/// memory clobber, as Google Benchmark's DoNotOptimize + ClobberMemory do; GCC and Clang.
void escape(void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

void log_allocation(const alloc_trace& t) {
  spdlog::debug(
      "alloc {} B -> {} B, {} pool, stream {:#x}, {}; allocated {:.1f} MiB, reserved {:.1f} MiB",
      t.requested, t.rounded, t.small_pool ? "small" : "large", t.stream, to_string(t.source),
      static_cast<double>(t.allocated_after) * kPerMiB,
      static_cast<double>(t.reserved_after) * kPerMiB);
}

std::unique_ptr<caching_allocator> make_allocator(allocator_options o = {}) {
  auto a = std::make_unique<caching_allocator>(std::make_shared<cuda_device_backend>(), o);
  a->set_trace_callback(log_allocation);
  return a;
}

// ---- allocation_cost ----------------------------------------------------------------------

allocation_cost_row measure_allocation_size(const config& cfg, cuda_stream& stream,
                                            stream_handle sh, caching_allocator& alloc,
                                            std::size_t bytes) {
  const stopping_rule rule = cfg.benchmark.rule();
  std::vector<double> m, f;  // the rule follows cudaMalloc; cudaFree's times come alongside
  (void)sample_each_with_sides(rule, m, {&f}, [&] {
    void* p = nullptr;
    const double t0 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaMalloc(&p, bytes));
    const double t1 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaFree(p));
    f.push_back(host_seconds() - t1);
    return t1 - t0;
  });
  void* w = nullptr;  // the pool's first allocation of this size stays out of the timing
  GPU_BASICS_CUDA_TRY(cudaMallocAsync(&w, bytes, stream.value()));
  GPU_BASICS_CUDA_TRY(cudaFreeAsync(w, stream.value()));
  stream.synchronize();
  const double async_pair =
      median_seconds(rule,
                     [&] {
                       for (int i = 0; i < kPairsPerSample; ++i) {
                         void* p = nullptr;
                         GPU_BASICS_CUDA_TRY(cudaMallocAsync(&p, bytes, stream.value()));
                         GPU_BASICS_CUDA_TRY(cudaFreeAsync(p, stream.value()));
                       }
                     }) /
      kPairsPerSample;
  stream.synchronize();
  alloc.deallocate(alloc.allocate(bytes, sh));  // cached from here on
  const double cached_pair = median_seconds(rule,
                                            [&] {
                                              for (int i = 0; i < kPairsPerSample; ++i)
                                                alloc.deallocate(alloc.allocate(bytes, sh));
                                            }) /
                             kPairsPerSample;
  return {bytes, summarize(m).median, summarize(f).median, async_pair, cached_pair};
}

allocation_cost_result measure_allocation_cost(const config& cfg, cuda_stream& stream,
                                               stream_handle sh, progress_counter& progress) {
  allocation_cost_result a;
  a.iterations = cfg.benchmark.iterations;
  a.warmup_iterations = cfg.benchmark.warmup_iterations;
  a.pairs_per_sample = kPairsPerSample;
  auto alloc = make_allocator();
  alloc->set_trace_callback(nullptr);  // the timed loops stay out of the debug log
  for (std::size_t bytes : {std::size_t{512}, 1 * MiB, 64 * MiB, 1024 * MiB}) {
    a.rows.push_back(measure_allocation_size(cfg, stream, sh, *alloc, bytes));
    progress.step("allocation cost " + format_bytes(bytes));
  }
  return a;
}

// ---- caching ------------------------------------------------------------------------------

caching_result measure_caching(stream_handle sh) {
  auto alloc = make_allocator();
  caching_result c;
  c.blocks = kCachingBlocks;
  c.block_bytes = kCachingBlockBytes;
  const auto step = [&](std::string kind, std::string label, double seconds) {
    const auto s = alloc->stats();
    c.steps.push_back({std::move(kind), std::move(label), s.allocated_bytes.current,
                       s.reserved_bytes.current, s.device_allocations, seconds});
  };
  const std::string block = format_bytes(kCachingBlockBytes);
  std::vector<void*> blocks(kCachingBlocks);
  double t0 = host_seconds();
  for (auto& p : blocks) p = alloc->allocate(kCachingBlockBytes, sh);
  step("allocate_cold", fmt::format("allocate {} x {} (cold)", kCachingBlocks, block),
       host_seconds() - t0);
  t0 = host_seconds();
  for (auto* p : blocks) alloc->deallocate(p);
  step("free", "free all four", host_seconds() - t0);
  t0 = host_seconds();
  for (auto& p : blocks) p = alloc->allocate(kCachingBlockBytes, sh);
  step("allocate_again", fmt::format("allocate {} x {} again (cache hits)", kCachingBlocks, block),
       host_seconds() - t0);
  for (auto* p : blocks) alloc->deallocate(p);
  t0 = host_seconds();
  const auto ec = alloc->empty_cache();
  step("empty_cache", "free all, then empty_cache()", host_seconds() - t0);
  t0 = host_seconds();
  void* again = alloc->allocate(kCachingBlockBytes, sh);
  step("allocate_after_empty_cache", fmt::format("allocate {} after empty_cache", block),
       host_seconds() - t0);
  alloc->deallocate(again);
  c.empty_cache = empty_cache_outcome{ec.released_bytes, ec.released_segments, ec.kept_bytes,
                                      ec.kept_in_use_segments, ec.kept_pending_segments};
  return c;
}

/// Allocated and reserved after each event of an allocator's history, timed from its first.
std::vector<usage_sample> timeline_of(const std::vector<history_event>& history) {
  const auto usage = memory_usage(history);
  std::vector<usage_sample> t;
  t.reserve(usage.size());
  for (const auto& u : usage)
    t.push_back({static_cast<double>(u.time_ns - usage.front().time_ns) * 1e-9, u.allocated_bytes,
                 u.reserved_bytes});
  return t;
}

// ---- peak (and --trace) -------------------------------------------------------------------

/// Forward: each layer keeps its activation; backward frees them in reverse, with a gradient
/// buffer alive per layer. Returns the bytes asked for.
std::uint64_t forward_backward(caching_allocator& alloc, stream_handle sh, peak_result& p) {
  std::vector<void*> acts;
  std::uint64_t asked = 0;
  for (int l = 0; l < kLayers; ++l) {
    scoped_range range(fmt::format("forward layer {}", l));
    const std::size_t n = (64 + 16 * static_cast<std::size_t>(l)) * MiB;
    acts.push_back(alloc.allocate(n, sh));
    p.activation_bytes.push_back(n);
    asked += n;
  }
  for (int l = kLayers - 1; l >= 0; --l) {
    scoped_range range(fmt::format("backward layer {}", l));
    void* grad = alloc.allocate(kGradientBytes, sh);
    asked += kGradientBytes;
    alloc.deallocate(acts[static_cast<std::size_t>(l)]);
    alloc.deallocate(grad);
  }
  return asked;
}

peak_result measure_peak(const context& ctx, stream_handle sh,
                         std::optional<trace_summary>& traced) {
  // The history gives the result's timeline, and with --trace the counter tracks of the trace.
  allocator_options o = allocator_options_of(ctx.cfg.memory.allocator.policy,  // memory.allocator
                                             ctx.cfg.memory.allocator.conf);
  o.history_capacity = 4096;
  auto alloc = make_allocator(o);
  auto trace = start_trace(ctx, trace_schedule{0, 0, 0});
  if (trace) trace->step();
  peak_result p;
  p.weights_bytes = kWeightsBytes;
  p.gradient_bytes = kGradientBytes;
  void* weights = alloc->allocate(kWeightsBytes, sh);
  alloc->reset_peak_stats();
  p.requested_bytes = forward_backward(*alloc, sh, p);
  const auto s = alloc->stats();
  p.peak_allocated_bytes = s.allocated_bytes.peak;
  p.peak_reserved_bytes = s.reserved_bytes.peak;
  alloc->deallocate(weights);
  const auto h = alloc->history();
  p.timeline = timeline_of(h);
  if (trace) traced = write_trace(ctx, *trace, nullptr, &h);
  if (ctx.snapshot_path) {  // the cache after the pass: segments kept, every block free
    const auto segments = alloc->segments();
    write_snapshot(*ctx.snapshot_path, segments, h, ctx.cfg.device, alloc->options());
    spdlog::info(
        "wrote {} ({} segments, {} history events; open it in "
        "https://pytorch.org/memory_viz or replay it with gpu-basics replay)",
        *ctx.snapshot_path, segments.size(), h.size());
  }
  return p;
}

// ---- pinned_vs_pageable -------------------------------------------------------------------

pinned_result measure_pinned(const config& cfg) {
  const auto shape_size = shape_bytes(cfg.transfer.tensor_shapes.back(), cfg.transfer.element_type);
  if (!shape_size) throw logic_error("transfer.tensor_shapes: the last shape's size overflows");
  pinned_result p;
  p.bytes = *shape_size;
  p.use_pinned_memory = cfg.memory.use_pinned_memory;
  p.allocate_repetitions = kHostAllocateRepetitions;
  p.copy_iterations = std::min(cfg.benchmark.iterations, kMaxCopyIterations);
  const std::size_t bytes = p.bytes;
  copy_bench bench(capped(cfg.benchmark.rule(), *p.copy_iterations));
  const stopping_rule few = capped(cfg.benchmark.rule(), kHostAllocateRepetitions);
  p.pageable_allocate_s = median_seconds(few, [&] {
    void* m = std::malloc(bytes);
    if (!m)
      throw out_of_memory("cannot allocate " + format_bytes(bytes) + " of host memory", bytes);
    std::memset(m, 1, bytes);  // malloc maps pages lazily: touching them is part of the cost
    escape(m);                 // else the compiler drops malloc + memset + free as dead code
    std::free(m);
  });
  p.pageable_h2d_bytes_per_s =
      bench.copy(copy_direction::h2d, host_memory::pageable, bytes).bandwidth_bytes_per_s.median;
  if (!p.use_pinned_memory) return p;
  p.pinned_allocate_s = median_seconds(few, [&] { pinned_buffer b(bytes); });
  pinned_host_pool pool(std::make_shared<cuda_pinned_backend>());
  pool.deallocate(pool.allocate(bytes));
  p.reuse_iterations = cfg.benchmark.iterations;
  p.pinned_reuse_s =
      median_seconds(cfg.benchmark.rule(), [&] { pool.deallocate(pool.allocate(bytes)); });
  p.pinned_h2d_bytes_per_s =
      bench.copy(copy_direction::h2d, host_memory::pinned, bytes).bandwidth_bytes_per_s.median;
  const auto s = pool.stats();
  p.pool = pinned_pool_outcome{s.backend_allocations, s.backend_frees, s.cache_hits, s.pin_seconds,
                               s.unpin_seconds};
  return p;
}

// ---- fragmentation ------------------------------------------------------------------------

/// A cached large block, small requests with every other one freed, then the large request again.
fragmentation_row measure_fragmentation_with(std::size_t limit, stream_handle sh) {
  allocator_options o;
  o.max_split_size = limit;
  auto alloc = make_allocator(o);
  alloc->deallocate(alloc->allocate(kLargeBytes, sh));  // the cached large block
  std::vector<void*> small;
  small.reserve(kSmallRequests);
  for (int i = 0; i < kSmallRequests; ++i) small.push_back(alloc->allocate(kSmallBytes, sh));
  for (std::size_t i = 0; i < small.size(); i += 2) alloc->deallocate(small[i]);  // holes
  const auto before = alloc->stats();
  void* big = alloc->allocate(kLargeBytes, sh);
  const auto after = alloc->stats();
  alloc->deallocate(big);
  for (std::size_t i = 1; i < small.size(); i += 2) alloc->deallocate(small[i]);
  fragmentation_row r;
  if (limit != SIZE_MAX) r.max_split_size = limit;
  r.fragmentation = before.fragmentation;
  r.largest_free_bytes = before.largest_free_block;
  r.reserved_bytes = after.reserved_bytes.current;
  r.new_segment = after.device_allocations > before.device_allocations;
  return r;
}

fragmentation_result measure_fragmentation(stream_handle sh) {
  fragmentation_result f;
  f.large_bytes = kLargeBytes;
  f.small_bytes = kSmallBytes;
  f.small_requests = kSmallRequests;
  for (std::size_t limit : {SIZE_MAX, kLimitedSplitBytes})
    f.rows.push_back(measure_fragmentation_with(limit, sh));
  return f;
}

// ---- expandable segments ------------------------------------------------------------------

constexpr int kExpandableSteps = 16;
constexpr int kExpandableLayers = 6;
constexpr std::size_t kCarriedBytes = 6 * MiB;

/// Activation size of step k: 16 MiB x a factor that changes every step (1..7, fixed order), a
/// stand-in for a sequence length that varies from batch to batch.
std::size_t activation_bytes_of(int step) {
  return static_cast<std::size_t>(1 + (step * 5) % 7) * 16 * MiB + 512 * 1024;
}

expandable_row measure_expandable_with(const allocator_options& base, bool expandable,
                                       stream_handle sh) {
  allocator_options o = base;
  o.expandable_segments = expandable;
  o.history_capacity = 1 << 16;
  auto backend = std::make_shared<cuda_device_backend>();
  const bool vm = backend->supports_virtual_memory();
  caching_allocator alloc(backend, o);
  void* carried = nullptr;
  for (int step = 0; step < kExpandableSteps; ++step) {
    const std::size_t act = activation_bytes_of(step);
    std::vector<void*> kept;
    for (int l = 0; l < kExpandableLayers; ++l) {
      void* temp = alloc.allocate(2 * act, sh);  // a temporary of the layer
      kept.push_back(alloc.allocate(act, sh));   // the activation, kept for backward
      alloc.deallocate(temp);
    }
    void* next_carried = alloc.allocate(kCarriedBytes, sh);  // e.g. logits kept for the next step
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      void* grad = alloc.allocate(act, sh);
      alloc.deallocate(*it);
      alloc.deallocate(grad);
    }
    alloc.deallocate(carried);
    carried = next_carried;
  }
  expandable_row r;
  r.expandable = expandable;
  r.virtual_memory = vm;
  const auto s = alloc.stats();
  r.peak_allocated_bytes = s.allocated_bytes.peak;
  r.peak_reserved_bytes = s.reserved_bytes.peak;
  r.device_allocations = s.device_allocations;
  r.reserved_before_empty_cache = s.reserved_bytes.current;
  r.released_by_empty_cache = alloc.empty_cache().released_bytes;
  r.reserved_after_empty_cache = alloc.stats().reserved_bytes.current;
  alloc.deallocate(carried);
  r.timeline = timeline_of(alloc.history());
  return r;
}

expandable_result measure_expandable(const config& cfg, stream_handle sh) {
  expandable_result e;
  e.steps = kExpandableSteps;
  e.layers = kExpandableLayers;
  e.carried_bytes = kCarriedBytes;
  for (int k = 0; k < kExpandableSteps; ++k) e.activation_bytes.push_back(activation_bytes_of(k));
  const allocator_options base =
      allocator_options_of(cfg.memory.allocator.policy, cfg.memory.allocator.conf);
  allocator_options rest = base;
  rest.expandable_segments = false;
  e.policy = to_conf_string(rest);
  for (bool expandable : {false, true})
    e.rows.push_back(measure_expandable_with(base, expandable, sh));
  return e;
}

}  // namespace

memory_result measure_memory(context& ctx) {
  progress_counter progress{ctx, 4 + 5};  // four allocation sizes, then five parts
  cuda_stream stream;
  const auto sh = reinterpret_cast<stream_handle>(stream.value());
  memory_result r;
  r.allocation_cost = measure_allocation_cost(ctx.cfg, stream, sh, progress);
  r.caching = measure_caching(sh);
  progress.step("caching and empty_cache");
  r.peak = measure_peak(ctx, sh, r.trace);
  progress.step("peak memory");
  r.pinned = measure_pinned(ctx.cfg);
  progress.step("pinned vs pageable");
  r.fragmentation = measure_fragmentation(sh);
  progress.step("fragmentation");
  r.expandable = measure_expandable(ctx.cfg, sh);
  progress.step("expandable segments");
  return r;
}

}  // namespace gpu_basics::lessons

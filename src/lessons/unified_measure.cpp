// Measuring the unified lesson: managed memory (first touch, the way back, oversubscription) and
// zero-copy; the ledger is in ledger_probe.cpp, the beliefs in unified_beliefs_measure.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "timed_part.hpp"
#include "unified_kernels.hpp"
#include "unified_measure.hpp"

namespace gpu_basics::lessons {

namespace unified_detail {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

stopping_rule rule_of_at_most(const config& cfg, int most) {
  return without_warmup(capped(cfg.benchmark.rule(), most));
}

void fail_key(const config& cfg, const std::string& key, const std::string& message) {
  const auto it = cfg.origins.find(key);
  const source_location loc = it != cfg.origins.end() ? it->second : source_location{"<default>"};
  throw config_error(loc.source, loc.line, loc.column, key, message);
}

void expect_intact(unsigned long long wrong, const std::string& what) {
  if (wrong != 0)
    throw verification_error(fmt::format("{}: {} bytes differ from the pattern", what, wrong));
}

managed_buffer::managed_buffer(std::size_t bytes) : bytes_(bytes) {
  GPU_BASICS_CUDA_TRY(cudaMallocManaged(&ptr_, bytes, cudaMemAttachGlobal));
}

managed_buffer::~managed_buffer() {
  if (ptr_) GPU_BASICS_CUDA_TRY_NOTHROW(cudaFree(ptr_));
}

cudaMemLocation device_location(int device) {
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = device;
  return loc;
}

cudaMemLocation host_location() {
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeHost;
  loc.id = 0;
  return loc;
}

memory_step plan_step(const context& ctx, std::string step, std::uint64_t wanted,
                      std::uint64_t free, bool shrinkable, std::uint64_t min_bytes) {
  gpu_neighbours others;
  others.why = ctx.nvml_status;
  if (ctx.nv) {
    const auto dev = ctx.nv->device_by_pci_bus_id(ctx.device().pci_bus_id);
    const auto listed = dev.ok() ? ctx.nv->compute_processes(dev.value)
                                 : reading<std::vector<nvml_process>>{dev.status, {}};
    if (listed.ok())
      others = neighbours_of(listed.value, static_cast<unsigned>(getpid()));
    else
      others.why = fmt::format("NVML's process list: {}", to_string(listed.status));
  }
  if (!others.known)
    spdlog::info("{}: other processes on the GPU unknown ({}); it runs as configured", step,
                 others.why);
  memory_step m = plan_memory_step(std::move(step), wanted, free, others, ctx.cfg.shared_gpu,
                                   shrinkable, min_bytes);
  if (!m.line.empty()) spdlog::warn("{}", m.line);
  return m;
}

}  // namespace unified_detail

using namespace unified_detail;

namespace {

constexpr std::uint32_t kSeed = 0x5eed2026u;

// ---- managed: first touch ---------------------------------------------------------------------

// The pattern written and checked on the host by every thread: untimed set-up and checks, which
// on one thread took most of a second per 512 MiB buffer (its page faults included) and most of
// the managed part's time.
void fill_on_host(thread_pool& pool, void* p, std::size_t bytes) {
  pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t n) {
    fill_pattern_host(static_cast<std::byte*>(p) + off, n, kSeed, off);
  });
}

std::size_t mismatches_on_host(thread_pool& pool, const void* p, std::size_t bytes) {
  std::atomic<std::size_t> bad{0};
  pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t n) {
    bad += count_pattern_mismatches_host(static_cast<const std::byte*>(p) + off, n, kSeed, off);
  });
  return bad.load();
}

/// A buffer filled on the CPU, then read by a kernel after `placement`'s preparation.
managed_touch touch_on_gpu(int device, std::size_t bytes, const std::string& placement,
                           cuda_stream& s, device_counter& wrong, thread_pool& pool) {
  managed_buffer buf(bytes);
  fill_on_host(pool, buf.get(), bytes);  // the pages are the CPU's now
  const cudaMemLocation gpu = device_location(device);
  if (placement == "read_mostly")
    GPU_BASICS_CUDA_TRY(cudaMemAdvise(buf.get(), bytes, cudaMemAdviseSetReadMostly, gpu));
  else if (placement == "preferred_location")
    GPU_BASICS_CUDA_TRY(cudaMemAdvise(buf.get(), bytes, cudaMemAdviseSetPreferredLocation, gpu));
  else if (placement == "accessed_by")
    GPU_BASICS_CUDA_TRY(cudaMemAdvise(buf.get(), bytes, cudaMemAdviseSetAccessedBy, gpu));
  wrong.reset(s);
  cuda_event start, stop;
  start.record(s);
  if (placement == "prefetch")
    GPU_BASICS_CUDA_TRY(cudaMemPrefetchAsync(buf.get(), bytes, gpu, 0, s.value()));
  enqueue_count_mismatches(buf.get(), bytes, kSeed, wrong.get(), s);
  stop.record(s);
  expect_intact(wrong.read(s), "managed memory read on the GPU (" + placement + ")");
  const double t = cuda_event::elapsed_s(start, stop);
  return {"to_gpu", placement, t, static_cast<double>(bytes) / t, std::nullopt};
}

/// A buffer written by a kernel, then read on the CPU (after a prefetch to the host, or not).
managed_touch touch_on_cpu(std::size_t bytes, const std::string& placement, cuda_stream& s,
                           thread_pool& pool) {
  managed_buffer buf(bytes);
  enqueue_fill_pattern(buf.get(), bytes, kSeed, s);  // the pages are the GPU's now
  s.synchronize();
  const double t0 = host_seconds();
  if (placement == "prefetch") {
    GPU_BASICS_CUDA_TRY(cudaMemPrefetchAsync(buf.get(), bytes, host_location(), 0, s.value()));
    s.synchronize();
  }
  // The read itself, timed: a plain sum over every word, so the rate is the pages' arrival and
  // not the pattern check's arithmetic (which follows, untimed).
  const auto* words = static_cast<const std::uint64_t*>(buf.get());
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) sum += words[i];
  const double t = host_seconds() - t0;
  if (sum == 0) throw verification_error("managed memory read on the CPU: all zero");
  expect_intact(mismatches_on_host(pool, buf.get(), bytes),
                "managed memory read on the CPU (" + placement + ")");
  return {"to_cpu", placement, t, static_cast<double>(bytes) / t, std::nullopt};
}

// ---- managed: oversubscription ----------------------------------------------------------------

/// One pass over `buf` chunk by chunk; with `prefetch`, each chunk is prefetched to the GPU
/// before its kernel. Returns the pass's seconds (events).
double oversubscribed_pass(managed_buffer& buf, std::size_t chunk, bool prefetch, int device,
                           cuda_stream& s, device_counter& wrong) {
  cuda_event start, stop;
  start.record(s);
  auto* base = static_cast<std::uint8_t*>(buf.get());
  for (std::size_t off = 0; off < buf.size(); off += chunk) {
    const std::size_t n = std::min(chunk, buf.size() - off);
    if (prefetch)
      GPU_BASICS_CUDA_TRY(
          cudaMemPrefetchAsync(base + off, n, device_location(device), 0, s.value()));
    enqueue_count_mismatches(base + off, n, kSeed, wrong.get(), s);
  }
  stop.record(s);
  stop.synchronize();
  return cuda_event::elapsed_s(start, stop);
}

oversubscription_point oversubscription_at(double ratio, std::uint64_t free_bytes,
                                           std::size_t chunk, const stopping_rule& rule, int device,
                                           cuda_stream& s, device_counter& wrong) {
  const auto want = static_cast<std::uint64_t>(ratio * static_cast<double>(free_bytes));
  const std::size_t bytes = std::max<std::size_t>(chunk, want / chunk * chunk);
  managed_buffer buf(bytes);
  auto* base = static_cast<std::uint8_t*>(buf.get());
  for (std::size_t off = 0; off < bytes; off += chunk)  // each chunk its own pattern from 0
    enqueue_fill_pattern(base + off, chunk, kSeed, s);
  wrong.reset(s);
  oversubscription_point p{ratio, bytes, 0, 0};
  for (const bool prefetch : {false, true}) {
    (void)oversubscribed_pass(buf, chunk, prefetch, device, s, wrong);  // untimed
    std::vector<double> seconds;
    (void)sample_each(rule, seconds,
                      [&] { return oversubscribed_pass(buf, chunk, prefetch, device, s, wrong); });
    std::vector<double> rates;
    for (const double t : seconds) rates.push_back(static_cast<double>(bytes) / t);
    (prefetch ? p.prefetch_bytes_per_s : p.faults_bytes_per_s) = median_of(rates);
  }
  expect_intact(wrong.read(s), fmt::format("oversubscribed managed memory at {:.2f}x", ratio));
  return p;
}

std::optional<oversubscription_result> measure_oversubscription(context& ctx, cuda_stream& s,
                                                                device_counter& wrong,
                                                                std::vector<memory_step>& steps) {
  const auto& o = ctx.cfg.unified.oversubscription;
  oversubscription_result r;
  r.mode = o.whole_device ? "whole_device" : "ballast";
  r.chunk_bytes = o.chunk_bytes;
  r.passes = o.passes;
  std::size_t free = 0, total = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free, &total));
  constexpr std::uint64_t kMargin = 512 * kMiB;  // for the context's own growth and the counters
  if (!o.whole_device && free < o.free_bytes + kMargin)
    fail_key(ctx.cfg, "unified.oversubscription.free_bytes",
             fmt::format("{} must stay free, but the device has {} free",
                         format_bytes(o.free_bytes), format_bytes(free)));
  r.free_bytes = o.whole_device ? free - std::min<std::uint64_t>(free, kMargin) : o.free_bytes;
  const double largest = *std::max_element(o.ratios.begin(), o.ratios.end());
  const auto largest_bytes =
      static_cast<std::uint64_t>(largest * static_cast<double>(r.free_bytes));
  // The ballast holds all but free_bytes; without it, the working sets span the free memory.
  const memory_step step =
      plan_step(ctx, o.whole_device ? "oversubscription" : "the oversubscription ballast",
                o.whole_device ? largest_bytes : free - o.free_bytes, free, false);
  if (step.action == "skipped") {
    steps.push_back(step);
    return std::nullopt;
  }
  r.host_available_bytes = host_available_bytes();
  if (*r.host_available_bytes > 0 && largest_bytes > *r.host_available_bytes / 10 * 8)
    fail_key(ctx.cfg, "unified.oversubscription.ratios",
             fmt::format("a working set of {:.2f} x {} = {} must fit in host memory when evicted, "
                         "but only {} is available (80% of it may be used); lower the ratios, "
                         "or set unified.oversubscription.whole_device: false",
                         largest, format_bytes(r.free_bytes), format_bytes(largest_bytes),
                         format_bytes(*r.host_available_bytes)));
  device_buffer ballast;
  if (!o.whole_device) {
    r.ballast_bytes = free - o.free_bytes;
    ballast = device_buffer(r.ballast_bytes);
  }
  const stopping_rule rule = rule_of_at_most(ctx.cfg, o.passes);
  int done = 0;
  for (const double ratio : o.ratios) {
    ctx.report_progress(fmt::format("oversubscription {:.2f}x", ratio), done++,
                        static_cast<int>(o.ratios.size()));
    r.points.push_back(
        oversubscription_at(ratio, r.free_bytes, o.chunk_bytes, rule, ctx.cfg.device, s, wrong));
  }
  return r;
}

managed_result measure_managed(context& ctx, cuda_stream& s, device_counter& wrong,
                               std::vector<memory_step>& steps) {
  const auto& m = ctx.cfg.unified.managed;
  managed_result r;
  r.bytes = m.bytes;
  r.fault_counter =
      "not counted: this version does not read CUPTI's unified-memory counters "
      "(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER); the times show the faults' cost";
  std::size_t free = 0, total = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free, &total));
  if (m.bytes * 2 > free)
    fail_key(ctx.cfg, "unified.managed.bytes",
             fmt::format("{} (twice, for the way back) does not fit in the {} free on the device",
                         format_bytes(m.bytes), format_bytes(free)));
  timed_part("unified", "managed touches", [&] {
    thread_pool pool{default_thread_count()};
    for (const char* placement :
         {"faults", "prefetch", "read_mostly", "preferred_location", "accessed_by"})
      r.touches.push_back(touch_on_gpu(ctx.cfg.device, m.bytes, placement, s, wrong, pool));
    for (const char* placement : {"faults", "prefetch"})
      r.touches.push_back(touch_on_cpu(m.bytes, placement, s, pool));
  });
  if (ctx.cfg.unified.oversubscription.enabled)
    r.oversubscription = timed_part("unified", "oversubscription",
                                    [&] { return measure_oversubscription(ctx, s, wrong, steps); });
  return r;
}

// ---- zero-copy --------------------------------------------------------------------------------

bool attribute(cudaDeviceAttr a, int device) {
  int v = 0;
  GPU_BASICS_CUDA_TRY(cudaDeviceGetAttribute(&v, a, device));
  return v != 0;
}

host_access_support host_access_of(int device) {
  host_access_support h;
  h.pageable_memory_access = attribute(cudaDevAttrPageableMemoryAccess, device);
  h.pageable_memory_access_uses_host_page_tables =
      attribute(cudaDevAttrPageableMemoryAccessUsesHostPageTables, device);
  h.concurrent_managed_access = attribute(cudaDevAttrConcurrentManagedAccess, device);
  h.can_use_host_pointer_for_registered_mem =
      attribute(cudaDevAttrCanUseHostPointerForRegisteredMem, device);
  h.direct_managed_mem_access_from_host =
      attribute(cudaDevAttrDirectManagedMemAccessFromHost, device);
  return h;
}

/// What one access pattern enqueues over a device-readable pointer: `passes` full reads, or one
/// sparse read.
struct reader {
  bool sparse = false;
  int passes = 1;
  int line_bytes = 128;
  int stride = 64;
  void operator()(const void* p, std::size_t bytes, unsigned long long* wrong,
                  stream_view s) const {
    if (sparse) {
      unified_kernels::enqueue_sparse_read(p, bytes, line_bytes, stride, kSeed, wrong, s);
      return;
    }
    for (int k = 0; k < passes; ++k) enqueue_count_mismatches(p, bytes, kSeed, wrong, s);
  }
};

/// The rule follows the mapped reads; the copy-then-compute times are their side series.
zero_copy_row zero_copy_access(const std::string& access, const reader& read,
                               const stopping_rule& rule, const void* mapped, device_buffer& copy,
                               const void* host, cuda_stream& s, device_counter& wrong) {
  const std::size_t bytes = copy.size();
  std::vector<double> mapped_s, copy_s;
  const sampling_outcome outcome = sample_each(rule, mapped_s, [&] {
    wrong.reset(s);
    cuda_event a, b, c, d;
    a.record(s);
    read(mapped, bytes, wrong.get(), s);
    b.record(s);
    enqueue_fill_zero(copy.data(), bytes, s);  // a copy that did nothing must fail the check
    c.record(s);
    GPU_BASICS_CUDA_TRY(
        cudaMemcpyAsync(copy.data(), host, bytes, cudaMemcpyHostToDevice, s.value()));
    read(copy.data(), bytes, wrong.get(), s);
    d.record(s);
    expect_intact(wrong.read(s), "zero-copy (" + access + ")");
    copy_s.push_back(cuda_event::elapsed_s(c, d));
    return cuda_event::elapsed_s(a, b);
  });
  const std::uint64_t per_pass =
      read.sparse ? bytes / static_cast<std::size_t>(read.stride) : bytes;
  return {access, read.passes, per_pass, median_of(mapped_s), median_of(copy_s), outcome};
}

zero_copy_result measure_zero_copy(context& ctx, cuda_stream& s, device_counter& wrong) {
  const auto& z = ctx.cfg.unified.zero_copy;
  zero_copy_result r;
  r.bytes = z.bytes / (static_cast<std::uint64_t>(r.line_bytes) * r.sparse_stride) *
            (static_cast<std::uint64_t>(r.line_bytes) * r.sparse_stride);
  r.repetitions = ctx.cfg.unified.repetitions;
  r.support = host_access_of(ctx.cfg.device);
  pinned_buffer host(r.bytes, cudaHostAllocMapped);
  fill_pattern_host(host.data(), r.bytes, kSeed);
  void* mapped = nullptr;
  GPU_BASICS_CUDA_TRY(cudaHostGetDevicePointer(&mapped, host.data(), 0));
  device_buffer copy(r.bytes);
  const reader one{false, 1, r.line_bytes, r.sparse_stride};
  const reader many{false, z.passes, r.line_bytes, r.sparse_stride};
  const reader sparse{true, 1, r.line_bytes, r.sparse_stride};
  const stopping_rule rule = rule_of_at_most(ctx.cfg, r.repetitions);
  r.rows.push_back(zero_copy_access("one_pass", one, rule, mapped, copy, host.data(), s, wrong));
  r.rows.push_back(zero_copy_access("passes", many, rule, mapped, copy, host.data(), s, wrong));
  r.rows.push_back(zero_copy_access("sparse", sparse, rule, mapped, copy, host.data(), s, wrong));
  return r;
}

}  // namespace

unified_result measure_unified(context& ctx) {
  const auto& u = ctx.cfg.unified;
  unified_result r;
  cuda_stream s;
  device_counter wrong;
  const int parts = 4;
  ctx.report_progress("managed memory", 0, parts);
  if (u.managed.enabled) r.managed = measure_managed(ctx, s, wrong, r.memory_steps);
  ctx.report_progress("zero-copy", 1, parts);
  if (u.zero_copy.enabled)
    r.zero_copy =
        timed_part("unified", "zero-copy", [&] { return measure_zero_copy(ctx, s, wrong); });
  ctx.report_progress("the memory ledger", 2, parts);
  if (u.ledger.enabled)
    r.ledger = timed_part("unified", "ledger", [&] { return measure_ledger(ctx); });
  ctx.report_progress("five beliefs", 3, parts);
  if (u.beliefs.enabled) r.beliefs = measure_beliefs(ctx, s, wrong, r.memory_steps);
  ctx.report_progress("done", parts, parts);
  return r;
}

}  // namespace gpu_basics::lessons

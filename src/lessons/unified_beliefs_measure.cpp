// Measuring the unified lesson's five beliefs: pin-then-copy, reading before the sync, the pool's
// release threshold, NVML's memory utilisation, D2D bandwidth against the working set. Every
// copy is verified against the data pattern.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/units.hpp"
#include "timed_part.hpp"
#include "unified_kernels.hpp"
#include "unified_measure.hpp"

namespace gpu_basics::lessons {

using namespace unified_detail;

namespace {

constexpr std::uint32_t kSeed = 0xbe11ef5u;

/// Bytes of the device buffer `p` that differ from the pattern (waits for `s`).
unsigned long long device_wrong(const void* p, std::size_t bytes, cuda_stream& s,
                                device_counter& wrong) {
  wrong.reset(s);
  enqueue_count_mismatches(p, bytes, kSeed, wrong.get(), s);
  return wrong.read(s);
}

// ---- 1. pin then copy -------------------------------------------------------------------------

pin_belief measure_pin(const config& cfg, cuda_stream& s, device_counter& wrong) {
  pin_belief b;
  b.bytes = cfg.unified.beliefs.copy_bytes;
  b.repeats = cfg.unified.beliefs.repeats;
  const std::size_t n = b.bytes;
  const std::unique_ptr<std::uint8_t[]> pageable(new std::uint8_t[n]);
  fill_pattern_host(pageable.get(), n, kSeed);
  device_buffer dst(n);
  pinned_buffer reused(n);
  std::memcpy(reused.data(), pageable.get(), n);
  std::vector<double> pageable_s, alloc_s, fill_s, once_s, pinned_s;
  // The rule follows the pageable copy; the other times are taken alongside, one per run.
  b.sampling = sample_each(rule_of_at_most(cfg, cfg.unified.repetitions), pageable_s, [&] {
    enqueue_fill_zero(dst.data(), n, s);
    s.synchronize();
    double t0 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaMemcpy(dst.data(), pageable.get(), n, cudaMemcpyHostToDevice));
    GPU_BASICS_CUDA_TRY(cudaDeviceSynchronize());  // a pageable copy may return before its DMA
    const double pageable_copy_s = host_seconds() - t0;
    expect_intact(device_wrong(dst.data(), n, s, wrong), "pageable H2D copy");

    enqueue_fill_zero(dst.data(), n, s);
    s.synchronize();
    t0 = host_seconds();
    {
      pinned_buffer pin(n);  // pin_memory(): a new page-locked buffer...
      const double t1 = host_seconds();
      std::memcpy(pin.data(), pageable.get(), n);  // ...and a copy into it
      const double t2 = host_seconds();
      GPU_BASICS_CUDA_TRY(
          cudaMemcpyAsync(dst.data(), pin.data(), n, cudaMemcpyHostToDevice, s.value()));
      s.synchronize();
      const double t3 = host_seconds();
      alloc_s.push_back(t1 - t0);
      fill_s.push_back(t2 - t1);
      once_s.push_back(t3 - t0);
    }  // cudaFreeHost is not counted
    expect_intact(device_wrong(dst.data(), n, s, wrong), "pin-then-copy H2D copy");

    enqueue_fill_zero(dst.data(), n, s);
    s.synchronize();
    t0 = host_seconds();
    GPU_BASICS_CUDA_TRY(
        cudaMemcpyAsync(dst.data(), reused.data(), n, cudaMemcpyHostToDevice, s.value()));
    s.synchronize();
    pinned_s.push_back(host_seconds() - t0);
    expect_intact(device_wrong(dst.data(), n, s, wrong), "pinned H2D copy");
    return pageable_copy_s;
  });
  b.pageable_copy_s = median_of(pageable_s);
  b.pin_allocate_s = median_of(alloc_s);
  b.pin_fill_s = median_of(fill_s);
  b.pinned_copy_s = median_of(pinned_s);
  b.pin_then_copy_once_s = median_of(once_s);
  return b;
}

// ---- 2. reading before the sync ---------------------------------------------------------------

stale_read_belief measure_stale_read(const config& cfg, cuda_stream& s) {
  stale_read_belief b;
  b.bytes = cfg.unified.beliefs.copy_bytes;
  const std::size_t n = b.bytes;
  device_buffer src(n);
  enqueue_fill_pattern(src.data(), n, kSeed, s);
  pinned_buffer dst(n);
  std::memset(dst.data(), 0, n);
  s.synchronize();
  // The copy waits behind work long enough for the host to read the whole destination first:
  // twice as long as one host check of it takes, and at least 50 ms.
  const double t0 = host_seconds();
  (void)count_pattern_mismatches_host(dst.data(), n, kSeed);
  const double delay_s = std::max(0.05, 2 * (host_seconds() - t0));
  cuda_event e0, e1, e2;
  e0.record(s);
  unified_kernels::enqueue_spin(static_cast<long long>(delay_s * unified_kernels::sm_clock_hz()),
                                s);
  e1.record(s);
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDeviceToHost, s.value()));
  e2.record(s);
  b.wrong_before_sync = count_pattern_mismatches_host(dst.data(), n, kSeed);  // no sync: wrong
  e2.synchronize();
  b.wrong_after_sync = count_pattern_mismatches_host(dst.data(), n, kSeed);
  b.delay_s = cuda_event::elapsed_s(e0, e1);
  return b;
}

// ---- 3. the pool's release threshold ----------------------------------------------------------

/// An owned memory pool on one device.
class memory_pool {
 public:
  memory_pool(int device, std::uint64_t release_threshold) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location = device_location(device);
    GPU_BASICS_CUDA_TRY(cudaMemPoolCreate(&pool_, &props));
    GPU_BASICS_CUDA_TRY(
        cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &release_threshold));
  }
  ~memory_pool() { GPU_BASICS_CUDA_TRY_NOTHROW(cudaMemPoolDestroy(pool_)); }
  memory_pool(const memory_pool&) = delete;
  memory_pool& operator=(const memory_pool&) = delete;
  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }
  [[nodiscard]] std::uint64_t reserved() const {
    std::uint64_t v = 0;
    GPU_BASICS_CUDA_TRY(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v));
    return v;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};

pool_belief measure_pool(const config& cfg, cuda_stream& s, device_counter& wrong) {
  pool_belief b;
  b.bytes = 64 * kMiB;
  const stopping_rule rule = rule_of_at_most(cfg, 10 * cfg.unified.repetitions);
  b.pairs = rule.max_samples;
  for (const std::uint64_t threshold :
       {std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()}) {
    memory_pool pool(cfg.device, threshold);
    const auto pair = [&] {
      const double t0 = host_seconds();
      void* p = nullptr;
      GPU_BASICS_CUDA_TRY(cudaMallocFromPoolAsync(&p, b.bytes, pool.get(), s.value()));
      enqueue_fill_pattern(p, b.bytes, kSeed, s);  // the memory is used, and checked
      wrong.reset(s);
      enqueue_count_mismatches(p, b.bytes, kSeed, wrong.get(), s);
      GPU_BASICS_CUDA_TRY(cudaFreeAsync(p, s.value()));
      s.synchronize();
      const double t = host_seconds() - t0;
      expect_intact(wrong.read(s), "memory from the pool");
      return t;
    };
    (void)pair();  // the first pair warms the pool, untimed
    std::vector<double> pair_s;
    const sampling_outcome outcome = sample_each(rule, pair_s, pair);
    b.rows.push_back({threshold, median_of(pair_s), pool.reserved(), outcome});
  }
  return b;
}

// ---- 4. NVML's memory utilisation -------------------------------------------------------------

struct nvml_phase {
  std::vector<double> util;
  std::uint64_t used = 0;
};

/// `samples` readings 50 ms apart, calling `between` before each.
template <class F>
nvml_phase sample_nvml(const nvml& nv, nvml_device d, int samples, F&& between) {
  nvml_phase p;
  for (int i = 0; i < samples; ++i) {
    between(i);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto u = nv.utilization(d);
    const auto m = nv.memory(d);
    if (u.ok()) p.util.push_back(u.value.memory_percent);
    if (m.ok()) p.used = m.value.used_bytes;
  }
  return p;
}

std::optional<nvml_util_belief> measure_nvml_util(const context& ctx, cuda_stream& s,
                                                  device_counter& wrong,
                                                  std::vector<memory_step>& steps) {
  if (!ctx.nv) return std::nullopt;
  const auto dev = ctx.nv->device_by_pci_bus_id(ctx.device().pci_bus_id);
  if (!dev.ok() || !ctx.nv->utilization(dev.value).ok()) return std::nullopt;
  nvml_util_belief b;
  b.idle_allocation_bytes = ctx.cfg.unified.beliefs.idle_allocation_bytes;
  b.busy_copy_bytes = kGiB;
  b.samples = 10;  // 50 ms apart: the median of half a second of NVML's windowed figure
  std::size_t free = 0, total = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free, &total));
  // The point (an idle allocation shows no memory utilisation) holds at any size: on a device
  // with less free memory than the key asks for, the allocation takes 80% of what is free, and
  // the result records the size used; beside other processes, what they leave it.
  const auto fits = static_cast<std::uint64_t>(0.8 * static_cast<double>(free)) / kMiB * kMiB;
  if (b.idle_allocation_bytes > fits) {
    spdlog::info(
        "unified.beliefs.idle_allocation_bytes: {} does not fit in the {} free on the "
        "device; allocating {} instead",
        format_bytes(b.idle_allocation_bytes), format_bytes(free), format_bytes(fits));
    b.idle_allocation_bytes = fits;
  }
  const memory_step step =
      plan_step(ctx, "the idle allocation", b.idle_allocation_bytes, free, true, 64 * kMiB);
  if (step.action != "ran") steps.push_back(step);
  if (step.action == "skipped") return std::nullopt;
  b.idle_allocation_bytes = step.used_bytes;
  {
    device_buffer idle(b.idle_allocation_bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto p = sample_nvml(*ctx.nv, dev.value, b.samples, [](int) {});
    b.idle_memory_util_percent = median_of(p.util);
    b.idle_used_bytes = p.used;
  }
  device_buffer a(b.busy_copy_bytes), c(b.busy_copy_bytes);
  enqueue_fill_pattern(a.data(), a.size(), kSeed, s);
  cuda_event batch[2];
  const auto p = sample_nvml(*ctx.nv, dev.value, b.samples, [&](int i) {
    if (i >= 2) batch[i % 2].synchronize();  // at most two batches queued
    for (int k = 0; k < 100; ++k)            // about 50 ms of copies at 2 TB/s
      GPU_BASICS_CUDA_TRY(
          cudaMemcpyAsync(c.data(), a.data(), a.size(), cudaMemcpyDeviceToDevice, s.value()));
    batch[i % 2].record(s);
  });
  s.synchronize();
  expect_intact(device_wrong(c.data(), c.size(), s, wrong), "D2D copy loop");
  b.busy_memory_util_percent = median_of(p.util);
  b.busy_used_bytes = p.used;
  return b;
}

// ---- 5. D2D against the working set -----------------------------------------------------------

d2d_belief measure_d2d(const context& ctx, cuda_stream& s, device_counter& wrong) {
  d2d_belief b;
  b.l2_bytes = ctx.device().l2_cache_bytes;
  const std::uint64_t max_ws = ctx.cfg.unified.beliefs.d2d_max_bytes;
  device_buffer src(max_ws / 2), dst(max_ws / 2);
  enqueue_fill_pattern(src.data(), src.size(), kSeed, s);
  const stopping_rule rule = rule_of_at_most(ctx.cfg, ctx.cfg.unified.repetitions);
  for (std::uint64_t ws = kMiB; ws <= max_ws; ws *= 2) {
    const std::size_t half = ws / 2;
    const int repeats = static_cast<int>(std::clamp<std::uint64_t>(4 * kGiB / half, 1, 4096));
    enqueue_fill_zero(dst.data(), half, s);
    unified_kernels::enqueue_repeated_copy(src.data(), dst.data(), half, 1, s);  // warm
    std::vector<double> seconds;
    const sampling_outcome outcome = sample_each(rule, seconds, [&] {
      cuda_event a, c;
      a.record(s);
      unified_kernels::enqueue_repeated_copy(src.data(), dst.data(), half, repeats, s);
      c.record(s);
      c.synchronize();
      return cuda_event::elapsed_s(a, c);
    });
    std::vector<double> rates;
    for (const double t : seconds) rates.push_back(static_cast<double>(half) * repeats / t);
    expect_intact(device_wrong(dst.data(), half, s, wrong),
                  fmt::format("D2D copy of a {} working set", format_bytes(ws)));
    b.points.push_back({ws, median_of(rates), outcome});
  }
  return b;
}

}  // namespace

beliefs_result measure_beliefs(context& ctx, cuda_stream& s, device_counter& wrong,
                               std::vector<memory_step>& steps) {
  beliefs_result b;
  b.pin = timed_part("unified", "belief pin", [&] { return measure_pin(ctx.cfg, s, wrong); });
  b.stale_read =
      timed_part("unified", "belief stale read", [&] { return measure_stale_read(ctx.cfg, s); });
  b.pool = timed_part("unified", "belief pool", [&] { return measure_pool(ctx.cfg, s, wrong); });
  b.nvml_util =
      timed_part("unified", "belief nvml", [&] { return measure_nvml_util(ctx, s, wrong, steps); });
  b.d2d = timed_part("unified", "belief d2d", [&] { return measure_d2d(ctx, s, wrong); });
  return b;
}

}  // namespace gpu_basics::lessons

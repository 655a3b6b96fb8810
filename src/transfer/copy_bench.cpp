#include "gpu_basics/transfer/copy_bench.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/sampling_sides.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "gpu_basics/transfer/staged_copy.hpp"

namespace gpu_basics {

std::string_view to_string(copy_direction d) noexcept {
  switch (d) {
    case copy_direction::h2d:
      return "H2D";
    case copy_direction::d2h:
      return "D2H";
    case copy_direction::d2d:
      return "D2D";
  }
  return "?";
}

std::string_view to_string(host_memory m) noexcept {
  return m == host_memory::pinned ? "pinned" : "pageable";
}

namespace {

/// Pageable host memory: a plain page-aligned allocation. Its pages are written before any timed
/// copy (ensure() zeroes a destination, fill_source() a source), so first-touch faults stay out
/// of the measurements.
struct pageable_memory {
  using handle_type = void*;
  static void* allocate(std::size_t n) {
    void* p = ::operator new (n, std::align_val_t{4096}, std::nothrow);
    if (!p) throw out_of_memory("cannot allocate " + format_bytes(n) + " of host memory", n);
    return p;
  }
  static void release(void* p) noexcept { ::operator delete (p, std::align_val_t{4096}); }
};
using pageable_buffer = owned_buffer<pageable_memory>;

constexpr std::uint64_t kMinStreamChunk = 64 * 1024;

}  // namespace

struct copy_bench::buffers {
  device_buffer dev_src, dev_dst;
  pinned_buffer pin_src, pin_dst;
  pageable_buffer page_src, page_dst;
  device_counter counter;
  cuda_stream s0, s1;
  thread_pool pool{default_thread_count()};
  std::uint32_t seed = 0x5eed;

  void ensure(copy_direction d, host_memory m, std::size_t bytes) {
    const bool host_src = d == copy_direction::h2d, host_dst = d == copy_direction::d2h;
    const bool need_dev_src = !host_src, need_dev_dst = !host_dst;
    if (need_dev_src && dev_src.size() < bytes) dev_src = device_buffer(bytes);
    if (need_dev_dst && dev_dst.size() < bytes) dev_dst = device_buffer(bytes);
    if (m == host_memory::pinned) {
      if (host_src && pin_src.size() < bytes) pin_src = pinned_buffer(bytes);
      if (host_dst && pin_dst.size() < bytes) pin_dst = pinned_buffer(bytes);
    } else {
      if (host_src && page_src.size() < bytes) page_src = pageable_buffer(bytes);
      if (host_dst && page_dst.size() < bytes) {
        page_dst = pageable_buffer(bytes);
        pool.parallel_ranges(bytes, 4096, [&](std::size_t off, std::size_t n) {
          std::memset(page_dst.as<std::byte>() + off, 0, n);
        });
      }
    }
  }

  void* src(copy_direction d, host_memory m) {
    if (d != copy_direction::h2d) return dev_src.data();
    return m == host_memory::pinned ? pin_src.data() : page_src.data();
  }
  void* dst(copy_direction d, host_memory m) {
    if (d != copy_direction::d2h) return dev_dst.data();
    return m == host_memory::pinned ? pin_dst.data() : page_dst.data();
  }

  // Note [fresh seed per download]
  // A download into pageable memory is checked on the host. Instead of zeroing the destination
  // before each copy (a host memset of the whole size, as long as the copy itself at 1 GiB),
  // the device source gets a fresh seed (a device fill, well under a millisecond): whatever the
  // copy left out still holds the previous seed's bytes, and a stale byte matches the new
  // pattern with chance 1/255, a stale word or more practically never.

  /// Fills the source with a fresh pattern; returns its seed.
  std::uint32_t fill_source(copy_direction d, host_memory m, std::size_t bytes) {
    const std::uint32_t sd = ++seed;
    void* p = src(d, m);
    if (d == copy_direction::h2d && m == host_memory::pageable) {
      pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t n) {
        fill_pattern_host(static_cast<std::byte*>(p) + off, n, sd, off);
      });
    } else {
      enqueue_fill_pattern(p, bytes, sd, s0);
      s0.synchronize();
    }
    return sd;
  }

  void reset_counter() { counter.reset(s0); }
  unsigned long long read_counter() { return counter.read(s0); }

  std::size_t host_mismatches(const void* p, std::size_t bytes, std::uint32_t sd) {
    std::atomic<std::size_t> total{0};
    pool.parallel_ranges(bytes, 4, [&](std::size_t off, std::size_t n) {
      total += count_pattern_mismatches_host(static_cast<const std::byte*>(p) + off, n, sd, off);
    });
    return total.load();
  }
};

copy_bench::copy_bench(measure_options o) : o_(o), b_(std::make_unique<buffers>()) {}
copy_bench::~copy_bench() = default;

namespace {

cudaMemcpyKind kind_of(copy_direction d) {
  switch (d) {
    case copy_direction::h2d:
      return cudaMemcpyHostToDevice;
    case copy_direction::d2h:
      return cudaMemcpyDeviceToHost;
    case copy_direction::d2d:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

void finish(copy_measurement& r) {
  r.time_s = summarize(r.seconds);
  const std::uint64_t moved = r.bytes_moved;
  r.bandwidth_bytes_per_s =
      summarize_mapped(r.seconds, [moved](double s) { return bandwidth_bytes_per_s(moved, s); });
}

void check(unsigned long long mismatches, const copy_measurement& r, std::string_view what) {
  if (mismatches)
    throw verification_error(fmt::format("{} {} {} copy of {}: {} bytes differ from what was sent",
                                         what, to_string(r.memory), to_string(r.direction),
                                         format_bytes(r.bytes), mismatches));
}

/// Samples `r` by the stopping rule: `batch(n, seconds)` appends n samples' seconds. Sets
/// r.seconds, r.sampling and r.verified_bytes (bytes_moved per sample); the caller's batches
/// verify each copy.
template <class F>
void sample_batches(const stopping_rule& rule, copy_samples& r, F batch) {
  figure_sampler s(rule);
  while (const int n = s.next_batch()) {
    std::vector<double> got;
    batch(n, got);
    s.add(got);
  }
  r.sampling = s.outcome();
  r.seconds = s.take_seconds();
  r.verified_bytes = r.bytes_moved * r.seconds.size();
}

/// Runs `samples` timed samples behind a blocking kernel on s0. `one(i, start, stop)` enqueues
/// the poison, the events around the copy, and the check.
template <class F>
void run_blocked(copy_bench::buffers& b, int samples, std::vector<double>& seconds, F one) {
  std::vector<cuda_event> start(static_cast<std::size_t>(samples)),
      stop(static_cast<std::size_t>(samples));
  {
    stream_blocker blocker;
    blocker.block(b.s0);
    for (int i = 0; i < samples; ++i)
      one(i, start[static_cast<std::size_t>(i)], stop[static_cast<std::size_t>(i)]);
    blocker.release();
    b.s0.synchronize();
    b.s1.synchronize();
    if (blocker.timed_out())
      spdlog::warn(
          "the blocking kernel timed out before all work was enqueued; timings may include enqueue "
          "cost");
  }
  for (int i = 0; i < samples; ++i)
    seconds.push_back(cuda_event::elapsed_s(start[static_cast<std::size_t>(i)],
                                            stop[static_cast<std::size_t>(i)]));
}

}  // namespace

copy_measurement copy_bench::copy(copy_direction d, host_memory m, std::uint64_t bytes) {
  GPU_BASICS_EXPECTS(bytes > 0, "zero-byte copy");
  auto& b = *b_;
  b.ensure(d, m, bytes);
  copy_measurement r;
  r.direction = d;
  r.memory = m;
  r.bytes = r.bytes_moved = bytes;
  std::uint32_t sd = b.fill_source(d, m, bytes);
  void* src = b.src(d, m);
  void* dst = b.dst(d, m);
  const cudaMemcpyKind kind = kind_of(d);
  for (int i = 0; i < o_.warmup; ++i)
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, b.s0.value()));
  b.s0.synchronize();
  b.reset_counter();
  const bool host_dst_pageable = d == copy_direction::d2h && m == host_memory::pageable;
  if (m == host_memory::pinned || d == copy_direction::d2d) {
    sample_batches(o_, r, [&](int n, std::vector<double>& got) {
      run_blocked(b, n, got, [&](int, cuda_event& start, cuda_event& stop) {
        enqueue_fill_zero(dst, bytes, b.s0);
        start.record(b.s0);
        GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, b.s0.value()));
        stop.record(b.s0);
        enqueue_count_mismatches(dst, bytes, sd, b.counter.get(), b.s0);
      });
    });
    check(b.read_counter(), r, "");
  } else {
    cuda_event start, stop;
    std::size_t host_bad = 0;
    sample_batches(o_, r, [&](int n, std::vector<double>& got) {
      for (int i = 0; i < n; ++i) {
        if (host_dst_pageable)  // Note [fresh seed per download]
          sd = b.fill_source(d, m, bytes);
        else
          enqueue_fill_zero(dst, bytes, b.s0);
        start.record(b.s0);
        GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, b.s0.value()));
        stop.record(b.s0);
        stop.synchronize();
        got.push_back(cuda_event::elapsed_s(start, stop));
        if (host_dst_pageable)
          host_bad += b.host_mismatches(dst, bytes, sd);
        else
          enqueue_count_mismatches(dst, bytes, sd, b.counter.get(), b.s0);
      }
    });
    check(b.read_counter() + host_bad, r, "");
  }
  finish(r);
  return r;
}

copy_measurement copy_bench::multi_stream(copy_direction d, std::uint64_t bytes, unsigned streams) {
  GPU_BASICS_EXPECTS(d != copy_direction::d2d, "multi-stream copies are host<->device");
  auto& b = *b_;
  b.ensure(d, host_memory::pinned, bytes);
  const auto chunks = split_even(bytes, streams, kMinStreamChunk);
  copy_measurement r;
  r.direction = d;
  r.memory = host_memory::pinned;
  r.bytes = r.bytes_moved = bytes;
  r.streams = static_cast<unsigned>(chunks.size());
  std::vector<cuda_stream> extra;
  for (std::size_t i = 1; i < chunks.size(); ++i) extra.emplace_back();
  std::vector<cuda_event> done(chunks.size());
  const std::uint32_t sd = b.fill_source(d, host_memory::pinned, bytes);
  auto* src = static_cast<std::byte*>(b.src(d, host_memory::pinned));
  auto* dst = static_cast<std::byte*>(b.dst(d, host_memory::pinned));
  const cudaMemcpyKind kind = kind_of(d);
  const auto enqueue = [&](cuda_event& start) {
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const cudaStream_t st = c == 0 ? b.s0.value() : extra[c - 1].value();
      if (c) GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(st, start.value(), 0));
      GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst + chunks[c].offset, src + chunks[c].offset,
                                          chunks[c].bytes, kind, st));
      if (c) {
        done[c].record(st);
        GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(b.s0.value(), done[c].value(), 0));
      }
    }
  };
  {
    cuda_event warm;
    for (int i = 0; i < o_.warmup; ++i) {
      warm.record(b.s0);
      enqueue(warm);
    }
    b.s0.synchronize();
  }
  b.reset_counter();
  sample_batches(o_, r, [&](int n, std::vector<double>& got) {
    run_blocked(b, n, got, [&](int, cuda_event& start, cuda_event& stop) {
      enqueue_fill_zero(dst, bytes, b.s0);
      start.record(b.s0);
      enqueue(start);
      stop.record(b.s0);
      enqueue_count_mismatches(dst, bytes, sd, b.counter.get(), b.s0);
    });
  });
  check(b.read_counter(), r, fmt::format("{}-stream", r.streams));
  finish(r);
  return r;
}

copy_measurement copy_bench::bidirectional(std::uint64_t bytes) {
  auto& b = *b_;
  b.ensure(copy_direction::h2d, host_memory::pinned, bytes);
  b.ensure(copy_direction::d2h, host_memory::pinned, bytes);
  copy_measurement r;
  r.direction = copy_direction::h2d;
  r.memory = host_memory::pinned;
  r.bidirectional = true;
  r.streams = 2;
  r.bytes = bytes;
  r.bytes_moved = 2 * bytes;
  // H2D: pin_src -> dev_dst.  D2H: dev_src -> pin_dst.
  const std::uint32_t sd_up = b.fill_source(copy_direction::h2d, host_memory::pinned, bytes);
  const std::uint32_t sd_down = b.fill_source(copy_direction::d2h, host_memory::pinned, bytes);
  // Each direction is timed on its own stream while the other runs: the sample's rate is the
  // sum of the two concurrent rates. (A joint start-to-last-finish time would charge the faster
  // direction for the slower one's tail; the joint times are kept in `seconds_joint`.)
  cuda_event done;
  const auto enqueue = [&](cuda_event& start, cuda_event* stop_up, cuda_event* start_down,
                           cuda_event* stop_down) {
    GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(b.s1.value(), start.value(), 0));
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(b.dev_dst.data(), b.pin_src.data(), bytes,
                                        cudaMemcpyHostToDevice, b.s0.value()));
    if (stop_up) stop_up->record(b.s0);
    if (start_down) start_down->record(b.s1);
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(b.pin_dst.data(), b.dev_src.data(), bytes,
                                        cudaMemcpyDeviceToHost, b.s1.value()));
    if (stop_down) stop_down->record(b.s1);
    done.record(b.s1);
    GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(b.s0.value(), done.value(), 0));
  };
  {
    cuda_event warm;
    for (int i = 0; i < o_.warmup; ++i) {
      warm.record(b.s0);
      enqueue(warm, nullptr, nullptr, nullptr);
    }
    b.s0.synchronize();
  }
  b.reset_counter();
  sample_batches(o_, r, [&](int count, std::vector<double>& got) {
    const auto n = static_cast<std::size_t>(count);
    std::vector<cuda_event> up_start(n), up_stop(n), down_start(n), down_stop(n);
    {
      stream_blocker blocker;
      blocker.block(b.s0);
      for (std::size_t k = 0; k < n; ++k) {
        enqueue_fill_zero(b.dev_dst.data(), bytes, b.s0);
        enqueue_fill_zero(b.pin_dst.data(), bytes, b.s0);
        up_start[k].record(b.s0);
        enqueue(up_start[k], &up_stop[k], &down_start[k], &down_stop[k]);
        enqueue_count_mismatches(b.dev_dst.data(), bytes, sd_up, b.counter.get(), b.s0);
        enqueue_count_mismatches(b.pin_dst.data(), bytes, sd_down, b.counter.get(), b.s0);
      }
      blocker.release();
      b.s0.synchronize();
      b.s1.synchronize();
    }
    for (std::size_t k = 0; k < n; ++k) {
      const double t_up = cuda_event::elapsed_s(up_start[k], up_stop[k]);
      const double t_down = cuda_event::elapsed_s(down_start[k], down_stop[k]);
      const double t_joint = cuda_event::elapsed_s(up_start[k], down_stop[k]);
      r.seconds_joint.push_back(std::max(t_joint, t_up));
      // The equivalent time for 2 x bytes at the sum of the two concurrent rates.
      const double rate = static_cast<double>(bytes) / t_up + static_cast<double>(bytes) / t_down;
      got.push_back(static_cast<double>(2 * bytes) / rate);
    }
  });
  check(b.read_counter(), r, "bidirectional");
  finish(r);
  return r;
}

sync_async_measurement copy_bench::sync_vs_async(copy_direction d, host_memory m,
                                                 std::uint64_t bytes) {
  GPU_BASICS_EXPECTS(d != copy_direction::d2d, "sync vs async compares host<->device copies");
  auto& b = *b_;
  b.ensure(d, m, bytes);
  std::uint32_t sd = b.fill_source(d, m, bytes);
  void* src = b.src(d, m);
  void* dst = b.dst(d, m);
  const cudaMemcpyKind kind = kind_of(d);
  const bool host_dst_pageable = d == copy_direction::d2h && m == host_memory::pageable;
  std::vector<double> sync_s, call_s, copy_s, free_s;
  cuda_event start, stop;
  std::size_t bad = 0;
  const auto verify = [&] {
    if (host_dst_pageable) {
      bad += b.host_mismatches(dst, bytes, sd);
      sd = b.fill_source(d, m, bytes);  // Note [fresh seed per download]
    } else {
      b.reset_counter();
      enqueue_count_mismatches(dst, bytes, sd, b.counter.get(), b.s0);
      bad += b.read_counter();
      enqueue_fill_zero(dst, bytes, b.s0);
      b.s0.synchronize();
    }
  };
  // One sample of each series per call; the stopping rule follows the blocking call's time.
  const auto one = [&]() -> double {
    const double t0 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaMemcpy(dst, src, bytes, kind));
    const double t1 = host_seconds();
    // From pageable memory cudaMemcpy returns once the data is staged, possibly before the last
    // DMA lands (CUDA's API sync-behavior notes): wait for it before checking the destination.
    GPU_BASICS_CUDA_TRY(cudaDeviceSynchronize());
    verify();
    start.record(b.s0);
    const double a0 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, b.s0.value()));
    const double a1 = host_seconds();
    stop.record(b.s0);
    stop.synchronize();
    const double a2 = host_seconds();
    verify();
    call_s.push_back(a1 - a0);
    copy_s.push_back(cuda_event::elapsed_s(start, stop));
    free_s.push_back(std::max(0.0, a2 - a1));
    return t1 - t0;
  };
  stopping_rule rule = capped(o_, kSyncAsyncSamples);
  rule.warmup = std::min(rule.warmup, 1);
  const sampling_outcome outcome =
      sample_each_with_sides(rule, sync_s, {&call_s, &copy_s, &free_s}, one);
  if (bad)
    throw verification_error(fmt::format("sync/async {} {} copy of {}: {} bytes differ",
                                         to_string(m), to_string(d), format_bytes(bytes), bad));
  sync_async_measurement r;
  r.direction = d;
  r.memory = m;
  r.bytes = bytes;
  r.sync_call_s = summarize(sync_s);
  r.async_call_s = summarize(call_s);
  r.async_copy_s = summarize(copy_s);
  r.async_free_s = summarize(free_s);
  r.sampling = outcome;
  return r;
}

copy_measurement copy_bench::staged(copy_direction d, std::uint64_t bytes,
                                    const staging_options& o) {
  return std::move(staged(d, bytes, std::span<const staging_options>(&o, 1)).front());
}

std::vector<copy_measurement> copy_bench::staged(copy_direction d, std::uint64_t bytes,
                                                 std::span<const staging_options> options) {
  GPU_BASICS_EXPECTS(d != copy_direction::d2d, "staged copies are host<->device");
  GPU_BASICS_EXPECTS(!options.empty(), "no staging options to measure");
  auto& b = *b_;
  b.ensure(d, host_memory::pageable, bytes);
  std::vector<std::unique_ptr<staged_copier>> copiers;
  std::vector<copy_measurement> out(options.size());
  for (std::size_t k = 0; k < options.size(); ++k) {
    copiers.push_back(std::make_unique<staged_copier>(options[k]));
    out[k].direction = d;
    out[k].memory = host_memory::pageable;
    out[k].bytes = out[k].bytes_moved = bytes;
  }
  std::uint32_t sd = b.fill_source(d, host_memory::pageable, bytes);
  void* src = b.src(d, host_memory::pageable);
  void* dst = b.dst(d, host_memory::pageable);
  std::vector<std::size_t> bad(options.size(), 0);
  // One copy of each choice per round: a slow stretch of the host lands on every choice alike.
  // The first choice is sampled by the rule; the others (variants shown beside it) by the rule
  // capped at kVariantSamples, and they leave the rounds once they have them.
  std::vector<figure_sampler> samplers;
  std::vector<char> in_rounds(options.size(), 1);
  std::vector<std::uint64_t> runs(options.size(), 0);
  const auto round = [&](bool keep) {
    for (std::size_t k = 0; k < options.size(); ++k) {
      if (!in_rounds[k]) continue;
      staged_copier& copier = *copiers[k];
      double seconds = 0;
      if (d == copy_direction::h2d) {
        enqueue_fill_zero(dst, bytes, b.s0);
        b.s0.synchronize();
        const double t0 = host_seconds();
        copier.upload(dst, src, bytes, b.s0);
        b.s0.synchronize();
        seconds = host_seconds() - t0;
        b.reset_counter();
        enqueue_count_mismatches(dst, bytes, sd, b.counter.get(), b.s0);
        bad[k] += b.read_counter();
      } else {
        sd = b.fill_source(d, host_memory::pageable, bytes);  // Note [fresh seed per download]
        const double t0 = host_seconds();
        copier.download(dst, src, bytes, b.s0);
        seconds = host_seconds() - t0;
        bad[k] += b.host_mismatches(dst, bytes, sd);
      }
      ++runs[k];
      if (keep) samplers[k].add(seconds);
    }
  };
  // Warm-up: rule.warmup rounds for one choice; one round when several are interleaved, since a
  // round already runs every copier once and each later round follows the same copies.
  const int warmup_rounds = options.size() > 1 ? std::min(o_.warmup, 1) : o_.warmup;
  for (int i = 0; i < warmup_rounds; ++i) round(false);
  for (std::size_t k = 0; k < options.size(); ++k)
    samplers.emplace_back(k == 0 ? o_ : capped(o_, kVariantSamples));
  const auto more = [&] {
    bool any = false;  // a sampler is asked until it says 0, so each records why it stopped
    for (std::size_t k = 0; k < options.size(); ++k) {
      in_rounds[k] = in_rounds[k] && samplers[k].next_batch() > 0;
      any = any || in_rounds[k];
    }
    return any;
  };
  while (more()) round(true);
  for (std::size_t k = 0; k < options.size(); ++k) {
    check(bad[k], out[k], "staged");
    out[k].sampling = samplers[k].outcome();
    out[k].seconds = samplers[k].take_seconds();
    out[k].verified_bytes = bytes * runs[k];
    finish(out[k]);
  }
  return out;
}

copy_measurement copy_bench::host_memcpy(std::uint64_t bytes, unsigned threads,
                                         std::uint64_t ring_bytes, std::uint64_t chunk_bytes,
                                         unsigned pieces_per_thread) {
  auto& b = *b_;
  const bool ring = ring_bytes > 0 && chunk_bytes > 0 && ring_bytes < bytes;
  b.ensure(copy_direction::h2d, host_memory::pageable, bytes);
  b.ensure(copy_direction::h2d, host_memory::pinned, ring ? ring_bytes : bytes);
  thread_pool pool(threads);
  copy_measurement r;
  r.direction = copy_direction::h2d;
  r.memory = host_memory::pageable;
  r.bytes = r.bytes_moved = bytes;
  r.streams = 0;
  const std::uint32_t sd = b.fill_source(copy_direction::h2d, host_memory::pageable, bytes);
  auto* src = b.page_src.as<std::byte>();
  auto* dst = static_cast<std::byte*>(b.pin_src.data());
  const auto chunks = ring ? split_fixed(bytes, chunk_bytes) : std::vector<chunk>{{0, bytes}};
  const std::uint64_t slots = ring ? std::max<std::uint64_t>(1, ring_bytes / chunk_bytes) : 1;
  const auto slot_offset = [&](std::size_t c) { return ring ? (c % slots) * chunk_bytes : 0; };
  r.sampling = sample_each(o_, r.seconds, [&] {
    const double t0 = host_seconds();
    for (std::size_t c = 0; c < chunks.size(); ++c)
      pool.parallel_ranges(
          chunks[c].bytes, 64,
          [&](std::size_t off, std::size_t n) {
            std::memcpy(dst + slot_offset(c) + off, src + chunks[c].offset + off, n);
          },
          pieces_per_thread);
    return host_seconds() - t0;
  });
  // Each slot holds the last chunk written to it.
  std::size_t bad = 0;
  for (std::size_t c = chunks.size() > slots ? chunks.size() - slots : 0; c < chunks.size(); ++c)
    bad +=
        count_pattern_mismatches_host(dst + slot_offset(c), chunks[c].bytes, sd, chunks[c].offset);
  check(bad, r, "host memcpy");
  r.verified_bytes = 0;
  for (std::size_t c = chunks.size() > slots ? chunks.size() - slots : 0; c < chunks.size(); ++c)
    r.verified_bytes += chunks[c].bytes;
  finish(r);
  return r;
}

register_measurement copy_bench::host_register(std::uint64_t bytes, int repeats) {
  auto& b = *b_;
  b.ensure(copy_direction::h2d, host_memory::pageable, bytes);
  register_measurement r;
  r.bytes = bytes;
  std::vector<double> reg, unreg;
  void* p = b.page_src.data();
  for (int i = 0; i < repeats; ++i) {
    const double t0 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
    const double t1 = host_seconds();
    if (i + 1 == repeats) {
      // Copies from the registered buffer run at pinned speed: measure them like pinned ones.
      try {
        const std::uint32_t sd = b.fill_source(copy_direction::h2d, host_memory::pageable, bytes);
        if (b.dev_dst.size() < bytes) b.dev_dst = device_buffer(bytes);
        copy_measurement c;
        c.direction = copy_direction::h2d;
        c.memory = host_memory::pinned;
        c.bytes = c.bytes_moved = bytes;
        for (int w = 0; w < o_.warmup; ++w)
          GPU_BASICS_CUDA_TRY(
              cudaMemcpyAsync(b.dev_dst.data(), p, bytes, cudaMemcpyHostToDevice, b.s0.value()));
        b.s0.synchronize();
        b.reset_counter();
        sample_batches(o_, c, [&](int n, std::vector<double>& got) {
          run_blocked(b, n, got, [&](int, cuda_event& start, cuda_event& stop) {
            enqueue_fill_zero(b.dev_dst.data(), bytes, b.s0);
            start.record(b.s0);
            GPU_BASICS_CUDA_TRY(
                cudaMemcpyAsync(b.dev_dst.data(), p, bytes, cudaMemcpyHostToDevice, b.s0.value()));
            stop.record(b.s0);
            enqueue_count_mismatches(b.dev_dst.data(), bytes, sd, b.counter.get(), b.s0);
          });
        });
        check(b.read_counter(), c, "registered");
        finish(c);
        r.registered_copy = std::move(c);
      } catch (...) {
        GPU_BASICS_CUDA_TRY_NOTHROW(cudaHostUnregister(p));
        throw;
      }
    }
    const double t2 = host_seconds();
    GPU_BASICS_CUDA_TRY(cudaHostUnregister(p));
    const double t3 = host_seconds();
    reg.push_back(t1 - t0);
    unreg.push_back(t3 - t2);
  }
  r.register_s = summarize(reg);
  r.unregister_s = summarize(unreg);
  return r;
}

}  // namespace gpu_basics

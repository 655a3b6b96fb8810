// measure_transfer: the copies of `gpu-basics transfer`, through copy_bench. No printing.
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "gpu_basics/transfer/staged_copy.hpp"
#include "timed_part.hpp"

namespace gpu_basics::lessons {

copy_figure figure_of(const copy_measurement& m) {
  return {m, std::string(to_string(m.direction)), std::string(to_string(m.memory))};
}

namespace {

constexpr copy_direction kHostDirections[] = {copy_direction::h2d, copy_direction::d2h};

struct configured_shape {
  std::string label;  // "[8192, 8192] float32"
  std::string key;    // "transfer.tensor_shapes[2]"
  std::uint64_t bytes = 0;
};

std::vector<configured_shape> configured_shapes(const config& cfg) {
  std::vector<configured_shape> shapes;
  for (std::size_t i = 0; i < cfg.transfer.tensor_shapes.size(); ++i) {
    const auto& s = cfg.transfer.tensor_shapes[i];
    const auto bytes = shape_bytes(s, cfg.transfer.element_type);
    GPU_BASICS_EXPECTS(bytes.has_value(), "validated tensor shape without a byte size");
    shapes.push_back({to_string(s) + " " + std::string(to_string(cfg.transfer.element_type)),
                      "transfer.tensor_shapes[" + std::to_string(i) + "]", *bytes});
  }
  return shapes;
}

/// Throws out_of_memory, naming the key that asks for the largest copy, before anything is
/// allocated when that copy cannot fit on the device or on the host.
void check_fits(const config& cfg, const std::vector<configured_shape>& shapes, bool sweep) {
  std::uint64_t largest = cfg.transfer.large_copy_bytes;
  std::string largest_key = "transfer.large_copy_bytes";
  for (const auto& s : shapes)
    if (s.bytes > largest) largest = s.bytes, largest_key = s.key;
  if (sweep && cfg.transfer.sweep.max_bytes > largest)
    largest = cfg.transfer.sweep.max_bytes, largest_key = "transfer.sweep.max_bytes";
  std::size_t free_b = 0, total_b = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  const std::uint64_t need_dev = 2 * largest + (64ull << 20);
  if (need_dev > free_b)
    throw out_of_memory(fmt::format("{}: a {} copy needs two device buffers ({}), but only {} of "
                                    "device memory is free",
                                    largest_key, format_bytes(largest), format_bytes(need_dev),
                                    format_bytes(free_b)),
                        need_dev);
  // Host: a pageable source and destination, pinned ones, the staging ring (up to 4x as large
  // for its variants) and the pipeline.
  const std::uint64_t staging = cfg.transfer.staging.chunk_bytes *
                                static_cast<std::uint64_t>(cfg.transfer.staging.buffers) *
                                (cfg.transfer.staging.variants ? 4 : 1);
  const auto& db = cfg.transfer.double_buffer;
  const std::uint64_t pipeline_host =
      db.enabled ? db.batch_bytes * static_cast<std::uint64_t>(db.batches) : 0;
  const std::uint64_t need_host =
      (cfg.memory.use_pinned_memory ? 4 : 2) * largest + staging + pipeline_host;
  const std::uint64_t avail = host_available_bytes();
  if (avail && need_host > avail)
    throw out_of_memory(fmt::format("{}: a {} copy needs {} of host memory, but only {} is "
                                    "available",
                                    largest_key, format_bytes(largest), format_bytes(need_host),
                                    format_bytes(avail)),
                        need_host);
}

std::vector<host_memory> memories_of(const config& cfg) {
  if (cfg.memory.use_pinned_memory) return {host_memory::pinned, host_memory::pageable};
  return {host_memory::pageable};
}

void measure_bandwidth(context& ctx, copy_bench& bench, const std::vector<configured_shape>& shapes,
                       transfer_result& r) {
  const auto memories = memories_of(ctx.cfg);
  const int total = static_cast<int>(shapes.size() * 2 * memories.size());
  int done = 0;
  for (const auto& s : shapes) {
    shape_copies sc{s.label, s.bytes, {}};
    for (copy_direction d : kHostDirections)
      for (host_memory m : memories) {
        ctx.report_progress(
            fmt::format("bandwidth: {} {} {}", to_string(d), to_string(m), format_bytes(s.bytes)),
            done++, total);
        sc.copies.push_back(figure_of(bench.copy(d, m, s.bytes)));
      }
    r.shapes.push_back(std::move(sc));
  }
  ctx.report_progress("bandwidth", total, total);
}

void measure_d2d(context& ctx, copy_bench& bench, const std::vector<configured_shape>& shapes,
                 transfer_result& r) {
  const int total = static_cast<int>(shapes.size());
  for (int i = 0; i < total; ++i) {
    const auto bytes = shapes[static_cast<std::size_t>(i)].bytes;
    ctx.report_progress("device to device " + format_bytes(bytes), i, total);
    r.d2d.push_back(figure_of(bench.copy(copy_direction::d2d, host_memory::pinned, bytes)));
  }
  ctx.report_progress("device to device", total, total);
}

void measure_sync_async(context& ctx, copy_bench& bench, transfer_result& r) {
  const std::uint64_t bytes = ctx.cfg.transfer.large_copy_bytes;
  for (host_memory m : memories_of(ctx.cfg)) {
    ctx.report_progress(fmt::format("sync vs async, {}", to_string(m)), 0, 1);
    const auto sa = bench.sync_vs_async(copy_direction::h2d, m, bytes);
    r.sync_async.push_back({std::string(to_string(m)), bytes, sa.sync_call_s, sa.async_call_s,
                            sa.async_copy_s, sa.async_free_s, sa.sampling});
  }
  ctx.report_progress("sync vs async", 1, 1);
}

streams_figures measure_streams(context& ctx, copy_bench& bench, std::uint64_t bytes) {
  streams_figures s;
  s.bytes = bytes;
  s.requested_streams = ctx.cfg.transfer.num_streams;
  const auto n = static_cast<unsigned>(ctx.cfg.transfer.num_streams);
  for (copy_direction d : kHostDirections) {
    ctx.report_progress(fmt::format("streams: {}", to_string(d)), 0, 1);
    stream_split split;
    split.one = figure_of(bench.multi_stream(d, bytes, 1));
    split.many = figure_of(bench.multi_stream(d, bytes, n));
    s.directions.push_back(std::move(split));
  }
  ctx.report_progress("streams: H2D + D2H", 0, 1);
  s.bidirectional = figure_of(bench.bidirectional(bytes));
  ctx.report_progress("streams", 1, 1);
  return s;
}

staging_options staging_of(const config& cfg) {
  staging_options so;
  so.chunk_bytes = cfg.transfer.staging.chunk_bytes;
  so.buffers = static_cast<unsigned>(cfg.transfer.staging.buffers);
  so.threads = cfg.transfer.staging.threads ? static_cast<unsigned>(cfg.transfer.staging.threads)
                                            : default_thread_count();
  so.streaming_stores = cfg.transfer.staging.streaming_stores;
  so.huge_pages = cfg.transfer.staging.huge_pages;
  so.pieces_per_thread = static_cast<unsigned>(cfg.transfer.staging.pieces_per_thread);
  so.enqueue_while_copying = cfg.transfer.staging.enqueue_while_copying;
  return so;
}

/// The configured staging with one choice changed at a time (two for streaming stores with
/// huge pages), each named by what changed; choices that would not change anything are left out.
/// The stores are changed to plain and to streaming in both directions, so each direction's
/// stores are flipped by one variant.
std::vector<std::pair<std::string, staging_options>> staging_variants(const staging_options& base,
                                                                      std::uint64_t bytes) {
  std::vector<std::pair<std::string, staging_options>> v;
  const auto add = [&](std::string name, const auto& change) {
    staging_options o = base;
    change(o);
    v.emplace_back(std::move(name), o);
  };
  // Plain and streaming stores both ways: between them, each direction's stores are changed
  // once whatever the configured mode.
  if (base.streaming_stores != store_mode::off)
    add("plain stores", [](staging_options& o) { o.streaming_stores = store_mode::off; });
  if (base.streaming_stores != store_mode::both)
    add("streaming stores both ways",
        [](staging_options& o) { o.streaming_stores = store_mode::both; });
  add(base.huge_pages ? "4 KiB-page ring" : "huge-page ring",
      [](staging_options& o) { o.huge_pages = !o.huge_pages; });
  if (base.streaming_stores != store_mode::both && !base.huge_pages)
    add("streaming stores both ways, huge-page ring", [](staging_options& o) {
      o.streaming_stores = store_mode::both;
      o.huge_pages = true;
    });
  if (base.pieces_per_thread > 1)
    add("one range per thread", [](staging_options& o) { o.pieces_per_thread = 1; });
  if (base.pieces_per_thread / 4 > 1)
    add(fmt::format("{} pieces per thread", base.pieces_per_thread / 4),
        [](staging_options& o) { o.pieces_per_thread /= 4; });
  if (base.pieces_per_thread * 4 <= 64)
    add(fmt::format("{} pieces per thread", base.pieces_per_thread * 4),
        [](staging_options& o) { o.pieces_per_thread *= 4; });
  add(base.enqueue_while_copying ? "upload DMA enqueued between chunks"
                                 : "upload DMA enqueued while copying",
      [](staging_options& o) { o.enqueue_while_copying = !o.enqueue_while_copying; });
  if (base.threads >= 2)
    add(fmt::format("{} threads", base.threads / 2),
        [](staging_options& o) { o.threads = o.threads / 2; });
  if (base.chunk_bytes / 4 >= 64 * 1024)
    add(format_bytes(base.chunk_bytes / 4) + " chunks",
        [](staging_options& o) { o.chunk_bytes = o.chunk_bytes / 4; });
  if (base.chunk_bytes * 4 <= bytes)
    add(format_bytes(base.chunk_bytes * 4) + " chunks",
        [](staging_options& o) { o.chunk_bytes = o.chunk_bytes * 4; });
  if (base.buffers * 2 <= 16)
    add(fmt::format("{} buffers", base.buffers * 2),
        [](staging_options& o) { o.buffers = o.buffers * 2; });
  return v;
}

/// The staging choices `o` as a result records them (staging_figures, staging_variant).
template <class Figures>
void record_options(Figures& f, const staging_options& o) {
  f.chunk_bytes = o.chunk_bytes;
  f.buffers = static_cast<int>(o.buffers);
  f.threads = static_cast<int>(o.threads);
  f.streaming_stores = o.streaming_stores;
  f.huge_pages = o.huge_pages;
  f.pieces_per_thread = static_cast<int>(o.pieces_per_thread);
  f.enqueue_while_copying = o.enqueue_while_copying;
}

staging_figures measure_staging(context& ctx, copy_bench& bench) {
  const std::uint64_t bytes = ctx.cfg.transfer.large_copy_bytes;
  const staging_options so = staging_of(ctx.cfg);
  staging_figures s;
  s.bytes = bytes;
  record_options(s, so);
  const auto variants = ctx.cfg.transfer.staging.variants
                            ? staging_variants(so, bytes)
                            : std::vector<std::pair<std::string, staging_options>>{};
  // The configured staging and its variants, each direction's repetitions interleaved: a
  // disturbance of the host then slows every choice alike and leaves their ranking standing.
  std::vector<staging_options> choices{so};
  for (const auto& v : variants) choices.push_back(v.second);
  const std::string with = variants.empty()
                               ? std::string()
                               : fmt::format(" and {} variants, interleaved", variants.size());
  const int total = ctx.cfg.memory.use_pinned_memory ? 7 : 6;
  int done = 0;
  const auto step = [&](const std::string& what) {
    ctx.report_progress("pageable copies: " + what, done++, total);
  };
  step("cudaMemcpy H2D");
  s.plain_up = figure_of(bench.copy(copy_direction::h2d, host_memory::pageable, bytes));
  step("staged upload" + with);
  auto up = bench.staged(copy_direction::h2d, bytes, choices);
  s.staged_up = figure_of(up.front());
  // The staged copy's host side: pageable reads into a cache-sized ring, as the staging does;
  // beside it a memcpy into a whole pinned buffer, whose writes go to DRAM too.
  step("host memcpy into the ring");
  s.ring_memcpy = figure_of(bench.host_memcpy(bytes, so.threads, so.chunk_bytes * so.buffers,
                                              so.chunk_bytes, so.pieces_per_thread));
  step("host memcpy into a whole buffer");
  s.dram_memcpy = figure_of(bench.host_memcpy(bytes, so.threads));
  if (ctx.cfg.memory.use_pinned_memory) {
    step("cudaMemcpyAsync H2D pinned");
    s.pinned_up = figure_of(bench.copy(copy_direction::h2d, host_memory::pinned, bytes));
  }
  step("cudaMemcpy D2H");
  s.plain_down = figure_of(bench.copy(copy_direction::d2h, host_memory::pageable, bytes));
  step("staged download" + with);
  auto down = bench.staged(copy_direction::d2h, bytes, choices);
  s.staged_down = figure_of(down.front());
  for (std::size_t k = 0; k < variants.size(); ++k) {
    staging_variant v;
    v.name = variants[k].first;
    record_options(v, variants[k].second);
    v.up = figure_of(up[k + 1]);
    v.down = figure_of(down[k + 1]);
    s.variants.push_back(std::move(v));
  }
  ctx.report_progress("pageable copies", total, total);
  return s;
}

host_register_figures measure_host_register(context& ctx, copy_bench& bench, std::uint64_t bytes) {
  ctx.report_progress("cudaHostRegister " + format_bytes(bytes), 0, 1);
  const auto reg = bench.host_register(bytes, 3);
  ctx.report_progress("cudaHostRegister", 1, 1);
  return {reg.bytes, reg.register_s, reg.unregister_s, figure_of(reg.registered_copy)};
}

std::vector<sweep_point> measure_sweep(context& ctx, copy_bench& bench) {
  const auto& sw = ctx.cfg.transfer.sweep;
  const auto sizes = power_of_two_sweep(sw.min_bytes, sw.max_bytes);
  const bool pinned = ctx.cfg.memory.use_pinned_memory;
  const staging_options so = staging_of(ctx.cfg);
  std::vector<sweep_point> out;
  const int total = static_cast<int>(sizes.size());
  for (int i = 0; i < total; ++i) {
    const std::uint64_t b = sizes[static_cast<std::size_t>(i)];
    ctx.report_progress("sweep: " + format_bytes(b), i, total);
    sweep_point p;
    p.bytes = b;
    if (pinned) {
      p.h2d_pinned = figure_of(bench.copy(copy_direction::h2d, host_memory::pinned, b));
      p.d2h_pinned = figure_of(bench.copy(copy_direction::d2h, host_memory::pinned, b));
    }
    p.h2d_pageable = figure_of(bench.copy(copy_direction::h2d, host_memory::pageable, b));
    p.d2h_pageable = figure_of(bench.copy(copy_direction::d2h, host_memory::pageable, b));
    p.h2d_staged = figure_of(bench.staged(copy_direction::h2d, b, so));
    p.d2h_staged = figure_of(bench.staged(copy_direction::d2h, b, so));
    out.push_back(std::move(p));
  }
  ctx.report_progress("sweep", total, total);
  return out;
}

}  // namespace

transfer_result measure_transfer(context& ctx) {
  const config& cfg = ctx.cfg;
  const device_info& dev = ctx.device();
  const auto shapes = configured_shapes(cfg);
  GPU_BASICS_EXPECTS(!shapes.empty(), "transfer.tensor_shapes is empty");
  const bool sweep = cfg.transfer.sweep.enabled.value_or(ctx.charts);
  check_fits(cfg, shapes, sweep);

  transfer_result r;
  r.iterations = cfg.benchmark.iterations;
  r.warmup_iterations = cfg.benchmark.warmup_iterations;
  r.use_pinned_memory = cfg.memory.use_pinned_memory;
  r.copy_engines = dev.copy_engines;
  r.link_bytes_per_s = device_link_bytes_per_s(dev);
  if (const auto sheet = find_datasheet(dev.name)) r.hbm_bytes_per_s = sheet->hbm_bytes_per_s;

  {  // the bench's buffers are freed before the double-buffering part allocates its own
    const char* t = "transfer";
    copy_bench bench(cfg.benchmark.rule());
    timed_part(t, "shapes", [&] { measure_bandwidth(ctx, bench, shapes, r); });
    timed_part(t, "d2d", [&] { measure_d2d(ctx, bench, shapes, r); });
    timed_part(t, "sync vs async", [&] { measure_sync_async(ctx, bench, r); });
    if (r.use_pinned_memory)
      r.streams = timed_part(t, "streams",
                             [&] { return measure_streams(ctx, bench, shapes.back().bytes); });
    r.pageable_upload =
        timed_part(t, "pageable copies", [&] { return measure_staging(ctx, bench); });
    if (r.use_pinned_memory)
      r.host_register = timed_part(t, "cudaHostRegister", [&] {
        return measure_host_register(ctx, bench, cfg.transfer.large_copy_bytes);
      });
    if (sweep) r.sweep = timed_part(t, "sweep", [&] { return measure_sweep(ctx, bench); });
  }
  spdlog::debug("transfer: host<->device copies measured");

  r.double_buffer =
      timed_part("transfer", "double-buffering", [&] { return measure_double_buffer(ctx); });
  r.multi_gpu = timed_part("transfer", "between GPUs", [&] { return measure_multi_gpu(ctx); });
  return r;
}

}  // namespace gpu_basics::lessons

// `gpu-basics transfer`: how data moves between host and GPU, measured and explained.
#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "gpu_basics/transfer/staged_copy.hpp"
#include "lesson.hpp"
#include "progress.hpp"

namespace gpu_basics::cli {

namespace {

constexpr double GB = 1e9;

std::uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

struct sized_shape {
  std::string label;  // "[8192, 8192] float32"
  std::string key;    // "transfer.tensor_shapes[2]"
  std::uint64_t bytes;
};

value pct(double v) { return v >= 0 ? value(v) : value(std::monostate{}); }

nlohmann::json measurement_json(const copy_measurement& m) {
  return {{"direction", to_string(m.direction)},
          {"memory", to_string(m.memory)},
          {"bytes", m.bytes},
          {"bytes_moved", m.bytes_moved},
          {"streams", m.streams},
          {"bidirectional", m.bidirectional},
          {"seconds", m.seconds},
          {"seconds_joint", m.seconds_joint},
          {"time_s", m.time_s},
          {"bandwidth_bytes_per_s", m.bandwidth_bytes_per_s},
          {"verified_bytes", m.verified_bytes}};
}

}  // namespace

report run_transfer(context& ctx) {
  const config& cfg = ctx.cfg;
  const device_info& dev = ctx.device();
  const auto link = device_link_bytes_per_s(dev);
  const auto sheet = find_datasheet(dev.name);
  const bool pinned = cfg.memory.use_pinned_memory;
  report r;
  r.command = "transfer";
  nlohmann::json raw = nlohmann::json::array();

  // ---- sizes, and whether they fit, before anything is allocated --------------------------
  std::vector<sized_shape> shapes;
  for (std::size_t i = 0; i < cfg.transfer.tensor_shapes.size(); ++i) {
    const auto& s = cfg.transfer.tensor_shapes[i];
    shapes.push_back({to_string(s) + " " + std::string(to_string(cfg.transfer.element_type)),
                      "transfer.tensor_shapes[" + std::to_string(i) + "]",
                      *shape_bytes(s, cfg.transfer.element_type)});
  }
  std::uint64_t largest = cfg.transfer.large_copy_bytes;
  std::string largest_key = "transfer.large_copy_bytes";
  for (const auto& s : shapes)
    if (s.bytes > largest) largest = s.bytes, largest_key = s.key;
  if (cfg.transfer.sweep.enabled && cfg.transfer.sweep.max_bytes > largest)
    largest = cfg.transfer.sweep.max_bytes, largest_key = "transfer.sweep.max_bytes";
  {
    std::size_t free_b = 0, total_b = 0;
    GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const std::uint64_t staging = cfg.transfer.staging.chunk_bytes * static_cast<std::uint64_t>(cfg.transfer.staging.buffers);
    const std::uint64_t need_dev = 2 * largest + (64ull << 20);
    if (need_dev > free_b)
      throw out_of_memory(fmt::format("{}: a {} copy needs two device buffers ({}), but only {} of "
                                      "device memory is free", largest_key, format_bytes(largest),
                                      format_bytes(need_dev), format_bytes(free_b)), need_dev);
    // Host: a pageable source and destination, pinned ones, and the staging ring.
    const auto& db = cfg.transfer.double_buffer;
    const std::uint64_t pipeline_host =
        db.enabled ? db.batch_bytes * static_cast<std::uint64_t>(db.batches) : 0;
    const std::uint64_t need_host = (pinned ? 4 : 2) * largest + staging + pipeline_host;
    const std::uint64_t avail = host_available_bytes();
    if (avail && need_host > avail)
      throw out_of_memory(fmt::format("{}: a {} copy needs {} of host memory, but only {} is "
                                      "available", largest_key, format_bytes(largest),
                                      format_bytes(need_host), format_bytes(avail)), need_host);
  }

  copy_bench bench({cfg.benchmark.warmup_iterations, cfg.benchmark.iterations});
  const std::vector<host_memory> memories =
      pinned ? std::vector<host_memory>{host_memory::pinned, host_memory::pageable}
             : std::vector<host_memory>{host_memory::pageable};

  // ---- 1. bandwidth per size, direction and host memory -----------------------------------
  {
    table t;
    t.id = "bandwidth";
    t.title = "Host <-> device copies, one stream (cudaMemcpyAsync between CUDA events)";
    t.columns = {{"shape", "tensor"},
                 {"bytes", "size", 1.0 / (1 << 20), 1},
                 {"direction", "dir"},
                 {"memory", "host memory"},
                 {"median_bytes_per_s", "GB/s", 1 / GB, 1},
                 {"min_bytes_per_s", "min", 1 / GB, 1},
                 {"max_bytes_per_s", "max", 1 / GB, 1},
                 {"rel_spread", "spread %", 100.0, 2},
                 {"link_percent", "% of link", 1.0, 1},
                 {"median_time_s", "time (us)", 1e6, 1}};
    t.columns[1].header = "MiB";
    progress bar("transfer: bandwidth", static_cast<int>(shapes.size() * 2 * memories.size()));
    double pinned_h2d = 0, pageable_h2d = 0;
    for (const auto& s : shapes)
      for (copy_direction d : {copy_direction::h2d, copy_direction::d2h})
        for (host_memory m : memories) {
          bar.step(fmt::format("{} {} {}", to_string(d), to_string(m), format_bytes(s.bytes)));
          const auto c = bench.copy(d, m, s.bytes);
          raw.push_back(measurement_json(c));
          const double med = c.bandwidth_bytes_per_s.median;
          if (s.bytes == shapes.back().bytes && d == copy_direction::h2d)
            (m == host_memory::pinned ? pinned_h2d : pageable_h2d) = med;
          t.add_row({s.label, static_cast<std::int64_t>(s.bytes), std::string(to_string(d)),
                     std::string(to_string(m)), med, c.bandwidth_bytes_per_s.min,
                     c.bandwidth_bytes_per_s.max, c.bandwidth_bytes_per_s.rel_spread,
                     pct(link ? percent_of(med, *link) : -1.0), c.time_s.median});
        }
    if (link)
      t.notes.push_back(fmt::format(
          "- The link: PCIe Gen{} x{}, {:.1f} GB/s per direction after encoding. Pinned copies of "
          "tens of MiB reach ~88% of it: each 256-byte TLP payload carries ~24 bytes of packet "
          "header and the copy engine adds per-request overhead.",
          *dev.pcie_generation_max, *dev.pcie_width_max, *link / GB));
    t.notes.push_back(
        "- Pinned (page-locked) memory is read by the copy engine directly (DMA). Pageable memory "
        "may be swapped or moved by the OS, so the driver first copies it with the CPU into its own "
        "small pinned buffer, then DMAs that: two copies, one of them by a single CPU thread.");
    if (pinned && pageable_h2d > 0)
      t.notes.push_back(fmt::format(
          "- At the largest size, pinned H2D is {:.1f}x faster than pageable H2D.", pinned_h2d / pageable_h2d));
    t.notes.push_back(
        "- Small copies are latency-bound: a few microseconds of fixed cost per copy dominate until "
        "the copy is large enough (MiBs) for bandwidth to matter; see transfer.sweep.");
    t.notes.push_back(
        "- 'spread' is the interquartile range over the median of the samples; every sample's "
        "destination was zeroed before and checked against the random source after the copy.");
    r.tables.push_back(std::move(t));
  }

  // ---- 2. device to device --------------------------------------------------------------
  {
    table t;
    t.id = "d2d";
    t.title = "Device -> device copies (cudaMemcpyAsync, HBM to HBM)";
    t.columns = {{"bytes", "MiB", 1.0 / (1 << 20), 1},
                 {"median_bytes_per_s", "GB/s (bytes once)", 1 / GB, 0},
                 {"median_read_write_bytes_per_s", "GB/s (read + write)", 1 / GB, 0},
                 {"rel_spread", "spread %", 100.0, 2},
                 {"hbm_percent", "% of HBM datasheet", 1.0, 1}};
    for (const auto& s : shapes) {
      const auto c = bench.copy(copy_direction::d2d, host_memory::pinned, s.bytes);
      raw.push_back(measurement_json(c));
      const double once = c.bandwidth_bytes_per_s.median;
      t.add_row({static_cast<std::int64_t>(s.bytes), once, 2 * once, c.bandwidth_bytes_per_s.rel_spread,
                 pct(sheet ? percent_of(2 * once, sheet->hbm_bytes_per_s) : -1.0)});
    }
    t.notes.push_back(
        "- A device copy reads every byte and writes it again, so HBM moves twice the copy's size: "
        "'bytes once' is the copy's rate as a program sees it, 'read + write' is what the memory did.");
    if (sheet)
      t.notes.push_back(fmt::format(
          "- The datasheet's {:.2f} TB/s is the pins' peak; copies reach ~85-90% of it. Sizes that fit "
          "in the {:.0f} MiB L2 can read faster than HBM.",
          sheet->hbm_bytes_per_s / 1e12, static_cast<double>(dev.l2_cache_bytes) / (1 << 20)));
    r.tables.push_back(std::move(t));
  }

  // ---- 3. synchronous vs asynchronous -----------------------------------------------------
  {
    const std::uint64_t bytes = cfg.transfer.large_copy_bytes;
    table t;
    t.id = "sync_async";
    t.title = fmt::format("Synchronous vs asynchronous H2D copies of {}: who waits?", format_bytes(bytes));
    t.columns = {{"memory", "host memory"},
                 {"api", "call"},
                 {"copy_s", "copy (ms)", 1e3, 2},
                 {"cpu_blocked_s", "CPU blocked (ms)", 1e3, 3},
                 {"cpu_free_s", "CPU free (ms)", 1e3, 2},
                 {"blocked_percent", "blocked %", 1.0, 1}};
    for (host_memory m : memories) {
      const auto sa = bench.sync_vs_async(copy_direction::h2d, m, bytes);
      t.add_row({std::string(to_string(m)), std::string("cudaMemcpy"), sa.sync_call_s.median,
                 sa.sync_call_s.median, 0.0, 100.0});
      t.add_row({std::string(to_string(m)), std::string("cudaMemcpyAsync"), sa.async_copy_s.median,
                 sa.async_call_s.median, sa.async_free_s.median,
                 percent_of(sa.async_call_s.median, sa.async_copy_s.median)});
      r.extra["sync_async"].push_back({{"memory", to_string(m)},
                                       {"bytes", bytes},
                                       {"sync_call_s", sa.sync_call_s},
                                       {"async_call_s", sa.async_call_s},
                                       {"async_copy_s", sa.async_copy_s},
                                       {"async_free_s", sa.async_free_s}});
    }
    t.notes.push_back(
        "- cudaMemcpy returns when the copy is done: the CPU waits the whole time. cudaMemcpyAsync "
        "from pinned memory only enqueues the copy and returns in microseconds; the CPU is free "
        "while the copy engine works.");
    t.notes.push_back(
        "- cudaMemcpyAsync from pageable memory is not asynchronous: the CPU itself must copy the "
        "data into the driver's staging buffer, so the call blocks for nearly the whole copy. "
        "Async overlap needs pinned memory.");
    r.tables.push_back(std::move(t));
  }

  // ---- 4. streams and copy engines --------------------------------------------------------
  if (pinned) {
    const std::uint64_t bytes = shapes.back().bytes;
    const unsigned n = static_cast<unsigned>(cfg.transfer.num_streams);
    table t;
    t.id = "streams";
    t.title = fmt::format("Streams and copy engines ({} pinned, {} copy engines)", format_bytes(bytes), dev.copy_engines);
    t.columns = {{"copy", "copy"},
                 {"streams", "streams"},
                 {"median_bytes_per_s", "GB/s (all directions)", 1 / GB, 1},
                 {"rel_spread", "spread %", 100.0, 2},
                 {"vs_one_stream", "x one stream", 1.0, 2}};
    double one_h2d = 0;
    for (copy_direction d : {copy_direction::h2d, copy_direction::d2h}) {
      const auto one = bench.multi_stream(d, bytes, 1);
      const auto many = bench.multi_stream(d, bytes, n);
      raw.push_back(measurement_json(one));
      raw.push_back(measurement_json(many));
      if (d == copy_direction::h2d) one_h2d = one.bandwidth_bytes_per_s.median;
      t.add_row({std::string(to_string(d)), std::int64_t{1}, one.bandwidth_bytes_per_s.median,
                 one.bandwidth_bytes_per_s.rel_spread, 1.0});
      t.add_row({std::string(to_string(d)), static_cast<std::int64_t>(many.streams),
                 many.bandwidth_bytes_per_s.median, many.bandwidth_bytes_per_s.rel_spread,
                 many.bandwidth_bytes_per_s.median / one.bandwidth_bytes_per_s.median});
      if (many.streams < n)
        t.notes.push_back(fmt::format(
            "- transfer.num_streams is {}, but a {} copy splits into at most {} chunks of >= 64 KiB: "
            "{} streams were used.", n, format_bytes(bytes), many.streams, many.streams));
    }
    const auto bi = bench.bidirectional(bytes);
    raw.push_back(measurement_json(bi));
    t.add_row({std::string("H2D + D2H"), std::int64_t{2}, bi.bandwidth_bytes_per_s.median,
               bi.bandwidth_bytes_per_s.rel_spread, bi.bandwidth_bytes_per_s.median / one_h2d});
    t.notes.push_back(
        "- Splitting one copy over several streams does not make it faster: all chunks of one "
        "direction go through the same copy engine and the same PCIe direction, one after another.");
    t.notes.push_back(fmt::format(
        "- PCIe is full duplex and the GPU has {} copy engines: an H2D and a D2H copy on two streams "
        "run at the same time, so together they move nearly twice the bytes per second (the sum "
        "of the two rates, each timed on its own stream while the other ran).",
        dev.copy_engines));
    r.tables.push_back(std::move(t));
  }

  // ---- 5. fast pageable upload ---------------------------------------------------------------
  {
    const std::uint64_t bytes = cfg.transfer.large_copy_bytes;
    staging_options so;
    so.chunk_bytes = cfg.transfer.staging.chunk_bytes;
    so.buffers = static_cast<unsigned>(cfg.transfer.staging.buffers);
    so.threads = cfg.transfer.staging.threads ? static_cast<unsigned>(cfg.transfer.staging.threads)
                                              : default_thread_count();
    table t;
    t.id = "pageable_upload";
    t.title = fmt::format("Moving {} of pageable memory: cudaMemcpy vs a staged copy ({} threads, "
                          "{} x {} pinned staging buffers)",
                          format_bytes(bytes), so.threads, so.buffers, format_bytes(so.chunk_bytes));
    t.columns = {{"direction", "dir"},
                 {"method", "method"},
                 {"median_bytes_per_s", "GB/s", 1 / GB, 1},
                 {"min_bytes_per_s", "min", 1 / GB, 1},
                 {"max_bytes_per_s", "max", 1 / GB, 1},
                 {"vs_cudamemcpy", "x cudaMemcpy", 1.0, 2}};
    const auto plain_up = bench.copy(copy_direction::h2d, host_memory::pageable, bytes);
    const auto staged_up = bench.staged(copy_direction::h2d, bytes, so);
    // The staged copy's host side: pageable reads into a cache-sized ring, as the staging does;
    // beside it a memcpy into a whole pinned buffer, whose writes go to DRAM too.
    const auto ceiling = bench.host_memcpy(bytes, so.threads, so.chunk_bytes * so.buffers, so.chunk_bytes);
    const auto dram_copy = bench.host_memcpy(bytes, so.threads);
    for (const auto* m : {&plain_up, &staged_up, &ceiling, &dram_copy}) raw.push_back(measurement_json(*m));
    const double base_up = plain_up.bandwidth_bytes_per_s.median;
    const auto row = [&](const char* dir, std::string method, const copy_measurement& m, double base) {
      t.add_row({std::string(dir), std::move(method), m.bandwidth_bytes_per_s.median,
                 m.bandwidth_bytes_per_s.min, m.bandwidth_bytes_per_s.max,
                 m.bandwidth_bytes_per_s.median / base});
    };
    row("H2D", "cudaMemcpy from pageable", plain_up, base_up);
    row("H2D", "staged upload (gpu_basics::staged_copier)", staged_up, base_up);
    row("host", fmt::format("ceiling: host memcpy into the {} staging ring, {} threads",
                            format_bytes(so.chunk_bytes * so.buffers), so.threads), ceiling, base_up);
    row("host", fmt::format("host memcpy into a whole {} pinned buffer, {} threads",
                            format_bytes(bytes), so.threads), dram_copy, base_up);
    std::optional<copy_measurement> pinned_up;
    if (pinned) {
      pinned_up = bench.copy(copy_direction::h2d, host_memory::pinned, bytes);
      raw.push_back(measurement_json(*pinned_up));
      row("H2D", "cudaMemcpyAsync from pinned (reference)", *pinned_up, base_up);
    }
    const auto plain_down = bench.copy(copy_direction::d2h, host_memory::pageable, bytes);
    const auto staged_down = bench.staged(copy_direction::d2h, bytes, so);
    raw.push_back(measurement_json(plain_down));
    raw.push_back(measurement_json(staged_down));
    const double base_down = plain_down.bandwidth_bytes_per_s.median;
    row("D2H", "cudaMemcpy to pageable", plain_down, base_down);
    row("D2H", "staged download (gpu_basics::staged_copier)", staged_down, base_down);
    t.notes.push_back(fmt::format(
        "- The staged copy reads each byte from pageable memory, writes it into pinned staging, and "
        "the DMA reads it again. The staging ring ({}) is small enough to stay in the CPU's cache, "
        "so only the pageable reads must come from DRAM: its ceiling is the host memcpy into such a "
        "ring ({:.1f} GB/s with {} threads), not the PCIe link ({:.1f} GB/s). It reached {:.0f}% of "
        "that ceiling. A memcpy into a whole {} buffer also writes DRAM and runs at {:.1f} GB/s.",
        format_bytes(so.chunk_bytes * so.buffers), ceiling.bandwidth_bytes_per_s.median / GB,
        so.threads, link ? *link / GB : 0.0,
        percent_of(staged_up.bandwidth_bytes_per_s.median, ceiling.bandwidth_bytes_per_s.median),
        format_bytes(bytes), dram_copy.bandwidth_bytes_per_s.median / GB));
    t.notes.push_back(
        "- Pageable copies vary from run to run more than pinned ones (page-cache state, the OS "
        "scheduling the copying threads): compare their medians, not single runs.");
    t.notes.push_back(
        "- cudaMemcpy does the same with one CPU thread and a small driver buffer; the staged copy "
        "spreads the memcpy over threads and overlaps it with the DMA of the previous chunk.");

    // Pinning in place: when does cudaHostRegister pay?
    if (pinned && pinned_up) {
      const auto reg = bench.host_register(bytes, 3);
      table rt;
      rt.id = "host_register";
      rt.title = fmt::format("Pinning {} in place with cudaHostRegister: when does it pay?", format_bytes(bytes));
      rt.columns = {{"what", "what"}, {"seconds", "ms", 1e3, 2}};
      const double per_pageable = plain_up.time_s.median;
      const double per_registered = reg.registered_copy.time_s.median;
      const double cost = reg.register_s.median + reg.unregister_s.median;
      const double saving = per_pageable - per_registered;
      rt.add_row({std::string("cudaHostRegister"), reg.register_s.median});
      rt.add_row({std::string("cudaHostUnregister"), reg.unregister_s.median});
      rt.add_row({std::string("one upload, pageable (cudaMemcpy)"), per_pageable});
      rt.add_row({std::string("one upload, registered"), per_registered});
      const double staged_time = staged_up.time_s.median;
      rt.add_row({std::string("one upload, staged"), staged_time});
      rt.notes.push_back(fmt::format(
          "- Registering costs {:.0f} ms (the OS pins every page and the driver maps them) and saves "
          "{:.0f} ms per upload compared with cudaMemcpy from pageable memory: it has paid for itself "
          "after {} upload(s) of the same buffer. Against the staged copy it pays after {}. For a "
          "buffer uploaded again and again, pin it once.",
          cost * 1e3, saving * 1e3, saving > 0 ? static_cast<int>(std::ceil(cost / saving)) : 0,
          staged_time > per_registered
              ? static_cast<int>(std::ceil(cost / (staged_time - per_registered)))
              : 0));
      r.extra["host_register"] = {{"bytes", bytes},
                                  {"register_s", reg.register_s},
                                  {"unregister_s", reg.unregister_s},
                                  {"registered_copy", measurement_json(reg.registered_copy)},
                                  {"break_even_uploads", saving > 0 ? nlohmann::json(std::ceil(cost / saving)) : nlohmann::json(nullptr)}};
      r.tables.push_back(std::move(t));
      r.tables.push_back(std::move(rt));
    } else {
      r.tables.push_back(std::move(t));
    }
  }

  // ---- 6. optional sweep ---------------------------------------------------------------------
  if (cfg.transfer.sweep.enabled) {
    const auto sizes = power_of_two_sweep(cfg.transfer.sweep.min_bytes, cfg.transfer.sweep.max_bytes);
    table t;
    t.id = "sweep";
    t.title = "Copy size sweep: latency gives way to bandwidth";
    t.columns = {{"bytes", "size"}, {"h2d_pinned_bytes_per_s", "H2D pinned GB/s", 1 / GB, 2},
                 {"d2h_pinned_bytes_per_s", "D2H pinned GB/s", 1 / GB, 2},
                 {"h2d_pageable_bytes_per_s", "H2D pageable GB/s", 1 / GB, 2},
                 {"h2d_pinned_time_s", "H2D pinned us", 1e6, 1}};
    progress bar("transfer: sweep", static_cast<int>(sizes.size()));
    for (std::uint64_t b : sizes) {
      bar.step(format_bytes(b));
      value h2d = std::monostate{}, d2h = std::monostate{}, t_h2d = std::monostate{};
      if (pinned) {
        const auto a = bench.copy(copy_direction::h2d, host_memory::pinned, b);
        const auto c = bench.copy(copy_direction::d2h, host_memory::pinned, b);
        raw.push_back(measurement_json(a));
        raw.push_back(measurement_json(c));
        h2d = a.bandwidth_bytes_per_s.median;
        d2h = c.bandwidth_bytes_per_s.median;
        t_h2d = a.time_s.median;
      }
      const auto p = bench.copy(copy_direction::h2d, host_memory::pageable, b);
      raw.push_back(measurement_json(p));
      t.add_row({format_bytes(b), h2d, d2h, p.bandwidth_bytes_per_s.median, t_h2d});
    }
    t.notes.push_back(
        "- Up to tens of KiB the time per copy barely changes: it is the fixed cost of a DMA "
        "request (a few microseconds), so bandwidth grows with size. From a few MiB on, the link "
        "is the limit and bandwidth flattens at its ceiling.");
    r.tables.push_back(std::move(t));
  }

  r.extra["measurements"] = raw;
  add_double_buffer(ctx, r);
  add_multi_gpu(ctx, r);
  return r;
}

}  // namespace gpu_basics::cli

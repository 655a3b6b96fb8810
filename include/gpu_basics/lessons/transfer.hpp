// `gpu-basics transfer`: how data moves between host and GPU, measured and explained. Copies of
// the configured tensors in both directions from pinned and pageable memory, device-to-device
// copies, synchronous vs asynchronous calls, streams and copy engines, a staged pageable upload,
// pinning in place, an optional size sweep; then the double-buffering (double_buffer.hpp) and
// between-GPUs (multi_gpu.hpp) parts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/transfer/copy_samples.hpp"

namespace gpu_basics {
struct copy_measurement;
}

namespace gpu_basics::lessons {

/// One timed copy (or host memcpy): its samples and their summaries (copy_samples), with the
/// direction and host memory as text. The keys are those schema 1 kept under
/// extra.measurements, so those entries read as they are.
struct copy_figure : copy_samples {
  std::string direction;  // "H2D", "D2H", "D2D"
  std::string memory;     // host side: "pinned", "pageable"

  bool operator==(const copy_figure&) const = default;
};
GPU_BASICS_JSON(copy_figure, direction, memory, bytes, bytes_moved, streams, bidirectional, seconds,
                seconds_joint, time_s, bandwidth_bytes_per_s, verified_bytes, sampling)

/// A copy_bench measurement as the results keep it.
[[nodiscard]] copy_figure figure_of(const copy_measurement& m);

/// One configured tensor and its copies ("bandwidth" table).
struct shape_copies {
  std::string shape;  // "[8192, 8192] float32"
  std::uint64_t bytes = 0;
  std::vector<copy_figure> copies;  // H2D then D2H; within each, pinned before pageable

  bool operator==(const shape_copies&) const = default;
};
GPU_BASICS_JSON(shape_copies, shape, bytes, copies)

/// cudaMemcpy vs cudaMemcpyAsync from one kind of host memory ("sync_async" table).
struct sync_async_figure {
  std::string memory;  // "pinned", "pageable"
  std::uint64_t bytes = 0;
  summary sync_call_s;                       // cudaMemcpy, host clock: the CPU is blocked all along
  summary async_call_s;                      // inside cudaMemcpyAsync: the CPU is blocked
  summary async_copy_s;                      // the copy on the GPU (events)
  summary async_free_s;                      // from the call's return to the copy's end
  std::optional<sampling_outcome> sampling;  // absent in results written before the rule

  bool operator==(const sync_async_figure&) const = default;
};
GPU_BASICS_JSON(sync_async_figure, memory, bytes, sync_call_s, async_call_s, async_copy_s,
                async_free_s, sampling)

/// One direction on one stream and split over several ("streams" table).
struct stream_split {
  copy_figure one;
  copy_figure many;  // many.streams: the streams actually used

  bool operator==(const stream_split&) const = default;
};
GPU_BASICS_JSON(stream_split, one, many)

struct streams_figures {
  std::uint64_t bytes = 0;                   // the last configured tensor, pinned
  int requested_streams = 0;                 // transfer.num_streams
  std::vector<stream_split> directions;      // H2D, D2H
  std::optional<copy_figure> bidirectional;  // H2D + D2H on two streams at once

  bool operator==(const streams_figures&) const = default;
};
GPU_BASICS_JSON(streams_figures, bytes, requested_streams, directions, bidirectional)

/// The staged copy with one choice changed from the configured one ("staging_variants" table).
struct staging_variant {
  std::string name;  // what changed, e.g. "streaming stores", "8 threads"
  std::uint64_t chunk_bytes = 0;
  int buffers = 0;
  int threads = 0;
  store_mode streaming_stores = store_mode::off;
  bool huge_pages = false;
  int pieces_per_thread = 1;           // absent from results written before the key: one range each
  bool enqueue_while_copying = false;  // absent from results written before it: between chunks
  copy_figure up, down;

  bool operator==(const staging_variant&) const = default;
};
GPU_BASICS_JSON(staging_variant, name, chunk_bytes, buffers, threads, streaming_stores, huge_pages,
                pieces_per_thread, enqueue_while_copying, up, down)

/// Pageable copies: cudaMemcpy vs the staged copier, and the host-side ceilings
/// ("pageable_upload" table).
struct staging_figures {
  std::uint64_t bytes = 0;        // transfer.large_copy_bytes
  std::uint64_t chunk_bytes = 0;  // transfer.staging.chunk_bytes
  int buffers = 0;                // transfer.staging.buffers
  int threads = 0;                // threads used (transfer.staging.threads, or one per core)
  copy_figure plain_up;           // cudaMemcpy from pageable
  copy_figure staged_up;
  copy_figure ring_memcpy;  // host memcpy into a staging-sized pinned ring: the ceiling
  copy_figure dram_memcpy;  // host memcpy into a whole pinned buffer
  std::optional<copy_figure> pinned_up;  // cudaMemcpyAsync from pinned, when pinned memory is used
  copy_figure plain_down;                // cudaMemcpy to pageable
  copy_figure staged_down;
  store_mode streaming_stores = store_mode::off;  // transfer.staging.streaming_stores
  bool huge_pages = false;                        // transfer.staging.huge_pages
  int pieces_per_thread = 1;  // transfer.staging.pieces_per_thread (1 in results written before it)
  bool enqueue_while_copying = false;  // transfer.staging.enqueue_while_copying (false before it)
  std::vector<staging_variant> variants;  // empty unless transfer.staging.variants

  bool operator==(const staging_figures&) const = default;
};
GPU_BASICS_JSON(staging_figures, bytes, chunk_bytes, buffers, threads, plain_up, staged_up,
                ring_memcpy, dram_memcpy, pinned_up, plain_down, staged_down, streaming_stores,
                huge_pages, pieces_per_thread, enqueue_while_copying, variants)

/// cudaHostRegister of the pageable buffer, and uploads from it ("host_register" table).
struct host_register_figures {
  std::uint64_t bytes = 0;
  summary register_s;
  summary unregister_s;
  copy_figure registered_copy;  // H2D from the registered buffer

  bool operator==(const host_register_figures&) const = default;
};
GPU_BASICS_JSON(host_register_figures, bytes, register_s, unregister_s, registered_copy)

/// One size of the sweep ("sweep" table).
struct sweep_point {
  std::uint64_t bytes = 0;
  std::optional<copy_figure> h2d_pinned;  // nullopt when pinned memory is not used
  std::optional<copy_figure> d2h_pinned;
  copy_figure h2d_pageable;
  std::optional<copy_figure> d2h_pageable;  // nullopt in files written before it was measured
  std::optional<copy_figure> h2d_staged;    // the staged copier (transfer.staging), both ways
  std::optional<copy_figure> d2h_staged;

  bool operator==(const sweep_point&) const = default;
};
GPU_BASICS_JSON(sweep_point, bytes, h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, h2d_staged,
                d2h_staged)

struct transfer_result {
  std::optional<int> iterations;              // benchmark.iterations (timed samples per copy)
  std::optional<int> warmup_iterations;       // benchmark.warmup_iterations; nullopt from schema 1
  bool use_pinned_memory = true;              // memory.use_pinned_memory
  std::optional<int> copy_engines;            // of the measured GPU
  std::optional<double> link_bytes_per_s;     // PCIe ceiling per direction behind "% of link"
  std::optional<double> hbm_bytes_per_s;      // datasheet HBM peak behind "% of HBM datasheet"
  std::vector<shape_copies> shapes;           // "bandwidth"
  std::vector<copy_figure> d2d;               // "d2d", one per shape
  std::vector<sync_async_figure> sync_async;  // pinned first, then pageable
  std::optional<streams_figures> streams;     // only with pinned memory
  std::optional<staging_figures> pageable_upload;
  std::optional<host_register_figures> host_register;  // only with pinned memory
  std::optional<std::vector<sweep_point>> sweep;       // nullopt when the sweep is off
  std::optional<double_buffer_result> double_buffer;   // nullopt when disabled
  std::optional<multi_gpu_result> multi_gpu;           // nullopt when disabled

  bool operator==(const transfer_result&) const = default;
};
GPU_BASICS_JSON(transfer_result, iterations, warmup_iterations, use_pinned_memory, copy_engines,
                link_bytes_per_s, hbm_bytes_per_s, shapes, d2d, sync_async, streams,
                pageable_upload, host_register, sweep, double_buffer, multi_gpu)

/// The notes of every table, then those of the double-buffering and between-GPUs parts.
[[nodiscard]] std::vector<note> explain_transfer(const transfer_result& r,
                                                 const device_facts& facts);
/// "bandwidth", "d2d", "sync_async", "streams", "pageable_upload", "host_register", "sweep"
/// (each where its data is), then the double-buffering and between-GPUs tables.
[[nodiscard]] std::vector<presentation::table> present_transfer(const transfer_result& r);
/// From a schema-1 block: each table's rows, fuller figures from extra.measurements,
/// extra.sync_async and extra.host_register where kept; the double-buffering and between-GPUs
/// parts from the same block.
/// @throws json_path_error (a format_error) naming the key path in the block of what cannot be
/// read.
[[nodiscard]] transfer_result transfer_from_v1(const nlohmann::json& block);

/// The registry's entry.
[[nodiscard]] lesson transfer_lesson();

}  // namespace gpu_basics::lessons

// `gpu-basics memory`: what a device allocation costs, what a caching allocator saves, what
// empty_cache gives back, the peak memory of a forward/backward-like pass, pinned against pageable
// host memory, and fragmentation with and without max_split_size. With --trace, the pass is traced
// with the allocator's allocated/reserved bytes as counter tracks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/trace_output.hpp"

namespace gpu_basics::lessons {

/// One request size of "allocation_cost": host-clock medians, seconds.
struct allocation_cost_row {
  std::uint64_t bytes = 0;
  double cuda_malloc_s = 0;        // one cudaMalloc
  double cuda_free_s = 0;          // one cudaFree
  double malloc_async_pair_s = 0;  // one cudaMallocAsync + cudaFreeAsync (a batch of pairs / pairs)
  double cached_pair_s = 0;  // one caching-allocator allocate + deallocate served by the cache

  bool operator==(const allocation_cost_row&) const = default;
};
GPU_BASICS_JSON(allocation_cost_row, bytes, cuda_malloc_s, cuda_free_s, malloc_async_pair_s,
                cached_pair_s)

struct allocation_cost_result {
  std::optional<int> iterations;         // timed samples per size (benchmark.iterations)
  std::optional<int> warmup_iterations;  // untimed cudaMalloc/cudaFree rounds first
  std::optional<int> pairs_per_sample;   // allocate + free pairs timed together (async, cached)
  std::vector<allocation_cost_row> rows;

  bool operator==(const allocation_cost_result&) const = default;
};
GPU_BASICS_JSON(allocation_cost_result, iterations, warmup_iterations, pairs_per_sample, rows)

/// One step of "caching", with the allocator's counters after it.
struct caching_step {
  /// "allocate_cold", "free", "allocate_again", "empty_cache", "allocate_after_empty_cache".
  std::string kind;
  std::string label;  // the row's text
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t device_allocations = 0;  // cudaMalloc calls so far
  double step_s = 0;                    // host clock

  bool operator==(const caching_step&) const = default;
};
GPU_BASICS_JSON(caching_step, kind, label, allocated_bytes, reserved_bytes, device_allocations,
                step_s)

/// What empty_cache() did.
struct empty_cache_outcome {
  std::uint64_t released_bytes = 0;
  std::uint64_t released_segments = 0;
  std::uint64_t kept_bytes = 0;
  std::uint64_t kept_in_use_segments = 0;   // a block still allocated
  std::uint64_t kept_pending_segments = 0;  // a block awaiting other streams' events

  bool operator==(const empty_cache_outcome&) const = default;
};
GPU_BASICS_JSON(empty_cache_outcome, released_bytes, released_segments, kept_bytes,
                kept_in_use_segments, kept_pending_segments)

struct caching_result {
  int blocks = 0;                 // allocated together
  std::uint64_t block_bytes = 0;  // each
  std::vector<caching_step> steps;
  std::optional<empty_cache_outcome> empty_cache;

  bool operator==(const caching_result&) const = default;
};
GPU_BASICS_JSON(caching_result, blocks, block_bytes, steps, empty_cache)

/// Allocated and reserved bytes after one event of the allocator's history.
struct usage_sample {
  double t_s = 0;  // host clock, from the first event of the pass
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;

  bool operator==(const usage_sample&) const = default;
};
GPU_BASICS_JSON(usage_sample, t_s, allocated_bytes, reserved_bytes)

/// "peak": weights allocated, peak stats reset, then a forward pass that keeps one activation per
/// layer and a backward pass that frees them in reverse with a gradient alive per layer.
struct peak_result {
  std::uint64_t weights_bytes = 0;
  std::optional<std::int64_t> peak_allocated_bytes;  // during the pass, weights included
  std::optional<std::int64_t> peak_reserved_bytes;
  std::uint64_t requested_bytes = 0;            // the sum of every allocation of the pass
  std::vector<std::uint64_t> activation_bytes;  // per layer, forward order; empty from schema 1
  std::optional<std::uint64_t> gradient_bytes;  // per backward layer
  /// From the allocator's history: the weights' allocation, the pass, the weights' free. Empty in
  /// files written before it was kept.
  std::vector<usage_sample> timeline;

  bool operator==(const peak_result&) const = default;
};
GPU_BASICS_JSON(peak_result, weights_bytes, peak_allocated_bytes, peak_reserved_bytes,
                requested_bytes, activation_bytes, gradient_bytes, timeline)

/// The pinned pool's counters after the reuse loop.
struct pinned_pool_outcome {
  std::int64_t backend_allocations = 0;  // blocks pinned
  std::int64_t backend_frees = 0;
  std::int64_t cache_hits = 0;
  double pin_s = 0;  // time spent pinning
  double unpin_s = 0;

  bool operator==(const pinned_pool_outcome&) const = default;
};
GPU_BASICS_JSON(pinned_pool_outcome, backend_allocations, backend_frees, cache_hits, pin_s, unpin_s)

/// "pinned_vs_pageable": one host buffer of the largest configured tensor.
struct pinned_result {
  std::uint64_t bytes = 0;
  bool use_pinned_memory = true;  // memory.use_pinned_memory: false measures pageable only
  std::optional<int> allocate_repetitions;  // allocations timed (median kept)
  std::optional<int> reuse_iterations;
  std::optional<int> copy_iterations;
  double pageable_allocate_s = 0;  // malloc + first touch + free
  std::optional<double> pageable_h2d_bytes_per_s;
  std::optional<double> pinned_allocate_s;  // cudaHostAlloc + cudaFreeHost
  std::optional<double> pinned_reuse_s;     // a pool allocate + deallocate served by its cache
  std::optional<double> pinned_h2d_bytes_per_s;
  std::optional<pinned_pool_outcome> pool;

  bool operator==(const pinned_result&) const = default;
};
GPU_BASICS_JSON(pinned_result, bytes, use_pinned_memory, allocate_repetitions, reuse_iterations,
                copy_iterations, pageable_allocate_s, pageable_h2d_bytes_per_s, pinned_allocate_s,
                pinned_reuse_s, pinned_h2d_bytes_per_s, pool)

/// One max_split_size of "fragmentation": the state before the second large request, and where
/// that request was served from.
struct fragmentation_row {
  std::optional<std::uint64_t> max_split_size;  // nullopt: unlimited
  double fragmentation = 0;                     // 1 - largest free block / all free bytes
  std::uint64_t largest_free_bytes = 0;
  std::int64_t reserved_bytes = 0;  // after the second large request
  bool new_segment = false;         // the second large request needed a cudaMalloc

  bool operator==(const fragmentation_row&) const = default;
};
GPU_BASICS_JSON(fragmentation_row, max_split_size, fragmentation, largest_free_bytes,
                reserved_bytes, new_segment)

struct fragmentation_result {
  std::uint64_t large_bytes = 0;      // the cached block, and the second large request
  std::uint64_t small_bytes = 0;      // each small request
  std::optional<int> small_requests;  // every other one freed
  std::vector<fragmentation_row> rows;

  bool operator==(const fragmentation_result&) const = default;
};
GPU_BASICS_JSON(fragmentation_result, large_bytes, small_bytes, small_requests, rows)

/// One run of the "expandable" workload: plain segments, or expandable segments.
struct expandable_row {
  bool expandable = false;     // expandable segments asked for
  bool virtual_memory = true;  // the device offered them (false: plain segments instead)
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t device_allocations = 0;           // cudaMalloc calls, or page mappings
  std::int64_t reserved_before_empty_cache = 0;  // after the steps, one block still live
  std::uint64_t released_by_empty_cache = 0;
  std::int64_t reserved_after_empty_cache = 0;
  std::vector<usage_sample> timeline;  // allocated and reserved after each event

  bool operator==(const expandable_row&) const = default;
};
GPU_BASICS_JSON(expandable_row, expandable, virtual_memory, peak_allocated_bytes,
                peak_reserved_bytes, device_allocations, reserved_before_empty_cache,
                released_by_empty_cache, reserved_after_empty_cache, timeline)

/// A fragmenting workload (training steps whose activation sizes change every step, with one
/// block carried into the next step) with and without expandable segments.
struct expandable_result {
  int steps = 0;
  int layers = 0;
  std::vector<std::uint64_t> activation_bytes;  // per step
  std::uint64_t carried_bytes = 0;              // the block each step keeps into the next
  std::string policy;  // the rest of the policy (memory.allocator), as a conf string
  std::vector<expandable_row> rows;

  bool operator==(const expandable_result&) const = default;
};
GPU_BASICS_JSON(expandable_result, steps, layers, activation_bytes, carried_bytes, policy, rows)

/// The memory lesson's result; a part is nullopt when it was not measured (a schema-1 file
/// without its table).
struct memory_result {
  std::optional<allocation_cost_result> allocation_cost;
  std::optional<caching_result> caching;
  std::optional<peak_result> peak;
  std::optional<trace_summary> trace;  // --trace: the peak pass
  std::optional<pinned_result> pinned;
  std::optional<fragmentation_result> fragmentation;
  std::optional<expandable_result> expandable;

  bool operator==(const memory_result&) const = default;
};
GPU_BASICS_JSON(memory_result, allocation_cost, caching, peak, trace, pinned, fragmentation,
                expandable)

/// Notes for every table present, each with figures from the result (and the PCIe link from
/// `facts`, when known).
[[nodiscard]] std::vector<note> explain_memory(const memory_result& r, const device_facts& facts);
/// "allocation_cost", "caching", "peak", ["trace",] "pinned_vs_pageable", "fragmentation",
/// "expandable_segments"; a part that is nullopt gives no table.
[[nodiscard]] std::vector<presentation::table> present_memory(const memory_result& r);
/// From a schema-1 block: the five tables (and "trace"), with extra.empty_cache, extra.peak_stats,
/// extra.pinned_pool and extra.trace where present. Sizes schema 1 kept as text (format_bytes:
/// "512 B", "1 MiB", "1.5 GiB") are read back to bytes.
/// @throws json_path_error (a format_error) naming the key path in the block of what cannot be
/// read.
[[nodiscard]] memory_result memory_from_v1(const nlohmann::json& block);

/// The registry's entry.
[[nodiscard]] lesson memory_lesson();

}  // namespace gpu_basics::lessons

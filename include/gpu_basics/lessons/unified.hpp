// `gpu-basics unified`: managed memory (first touch with faults, prefetch and advice, the way
// back to the CPU, oversubscription), zero-copy reads of mapped pinned memory against
// copy-then-compute, the memory ledger (what nvidia-smi counts for a process and why it is more
// than the allocator's figure), and five common beliefs measured. Host-only: the result, its notes
// and tables; measuring is in lessons/measure.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/shared_gpu.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

// ---- 1. managed memory -----------------------------------------------------------------------

/// One first touch of a managed buffer: where it was, what was done first, and how long the
/// touch took (prefetch included).
struct managed_touch {
  /// "to_gpu": filled on the CPU, read by a kernel; "to_cpu": written by a kernel, read on the CPU.
  std::string direction;
  /// "faults" (as it is), "prefetch", "read_mostly", "preferred_location", "accessed_by".
  std::string placement;
  double seconds = 0;      // the touch, with its prefetch (GPU: events; CPU: host clock)
  double bytes_per_s = 0;  // buffer bytes / seconds
  std::optional<std::uint64_t> faults;  // page faults counted (nullopt: not counted)

  bool operator==(const managed_touch&) const = default;
};
GPU_BASICS_JSON(managed_touch, direction, placement, seconds, bytes_per_s, faults)

/// One working set of the oversubscription sweep: a pass over it, kernels chunk by chunk.
struct oversubscription_point {
  double ratio = 0;                 // working set / the device memory left free
  std::uint64_t bytes = 0;          // the working set
  double faults_bytes_per_s = 0;    // chunks touched as they are
  double prefetch_bytes_per_s = 0;  // each chunk prefetched to the GPU before its kernel

  bool operator==(const oversubscription_point&) const = default;
};
GPU_BASICS_JSON(oversubscription_point, ratio, bytes, faults_bytes_per_s, prefetch_bytes_per_s)

struct oversubscription_result {
  /// "ballast": a cudaMalloc holds all device memory but `free_bytes`; "whole_device": none.
  std::string mode;
  std::uint64_t free_bytes = 0;                       // device memory the ratios are of
  std::uint64_t ballast_bytes = 0;                    // held by the ballast (0 for whole_device)
  std::uint64_t chunk_bytes = 0;                      // per kernel (and per prefetch)
  std::optional<std::uint64_t> host_available_bytes;  // MemAvailable before the sweep
  int passes = 0;  // the most timed passes per point (median kept), after one untimed pass
  std::vector<oversubscription_point> points;

  bool operator==(const oversubscription_result&) const = default;
};
GPU_BASICS_JSON(oversubscription_result, mode, free_bytes, ballast_bytes, chunk_bytes,
                host_available_bytes, passes, points)

struct managed_result {
  std::uint64_t bytes = 0;  // each first-touch buffer
  /// How page faults were counted, or why they were not ("not counted: ...").
  std::string fault_counter;
  std::vector<managed_touch> touches;
  std::optional<oversubscription_result> oversubscription;  // nullopt: switched off

  bool operator==(const managed_result&) const = default;
};
GPU_BASICS_JSON(managed_result, bytes, fault_counter, touches, oversubscription)

// ---- 2. zero-copy ----------------------------------------------------------------------------

/// One access pattern read straight from mapped pinned memory, and with one bulk copy first.
struct zero_copy_row {
  std::string access;              // "one_pass", "passes", "sparse"
  int passes = 1;                  // kernels over the buffer
  std::uint64_t bytes_read = 0;    // per pass, by the kernel (sparse: 1 cache line in `stride`)
  double mapped_s = 0;             // kernels reading the mapped host memory
  double copy_then_compute_s = 0;  // one H2D copy of the whole buffer, kernels on the copy
  /// Of the mapped reads (the copies are taken alongside); absent before the rule.
  std::optional<sampling_outcome> sampling;

  bool operator==(const zero_copy_row&) const = default;
};
GPU_BASICS_JSON(zero_copy_row, access, passes, bytes_read, mapped_s, copy_then_compute_s, sampling)

/// What the device says it can do with host memory (cudaDeviceGetAttribute).
struct host_access_support {
  bool pageable_memory_access = false;  // HMM or ATS: kernels read malloc'd memory
  bool pageable_memory_access_uses_host_page_tables = false;  // ATS (the host's page tables)
  bool concurrent_managed_access = false;                // CPU and GPU touch managed memory at once
  bool can_use_host_pointer_for_registered_mem = false;  // registered memory: same address
  bool direct_managed_mem_access_from_host = false;      // CPU reads device-resident pages

  bool operator==(const host_access_support&) const = default;
};
GPU_BASICS_JSON(host_access_support, pageable_memory_access,
                pageable_memory_access_uses_host_page_tables, concurrent_managed_access,
                can_use_host_pointer_for_registered_mem, direct_managed_mem_access_from_host)

struct zero_copy_result {
  std::uint64_t bytes = 0;  // the mapped buffer
  int line_bytes = 128;     // a cache line
  int sparse_stride = 64;   // the sparse kernel reads one line in this many
  int repetitions = 0;      // the most timed repetitions (median kept; benchmark.*'s rule)
  std::vector<zero_copy_row> rows;
  host_access_support support;

  bool operator==(const zero_copy_result&) const = default;
};
GPU_BASICS_JSON(zero_copy_result, bytes, line_bytes, sparse_stride, repetitions, rows, support)

// ---- 3. the memory ledger --------------------------------------------------------------------

/// One step of a fresh process, with NVML's device memory used after it.
struct ledger_step {
  /// "start", "context", "first_allocation", "first_kernel", "cublaslt_handle", "first_gemm",
  /// "allocator_blocks", "allocator_free_half".
  std::string step;
  std::string label;
  std::uint64_t used_bytes = 0;       // NVML, whole device, after the step
  std::uint64_t requested_bytes = 0;  // what the step asked for itself (allocations)

  bool operator==(const ledger_step&) const = default;
};
GPU_BASICS_JSON(ledger_step, step, label, used_bytes, requested_bytes)

/// A fresh process's steps under one CUDA_MODULE_LOADING.
struct ledger_probe {
  std::string module_loading;  // "LAZY" or "EAGER"
  std::vector<ledger_step> steps;
  std::int64_t allocator_allocated_bytes = 0;  // the caching allocator at the end
  std::int64_t allocator_reserved_bytes = 0;
  std::uint64_t cublaslt_workspace_bytes = 0;  // asked for

  bool operator==(const ledger_probe&) const = default;
};
GPU_BASICS_JSON(ledger_probe, module_loading, steps, allocator_allocated_bytes,
                allocator_reserved_bytes, cublaslt_workspace_bytes)

struct ledger_result {
  /// "child_process": `gpu-basics ledger-probe` run fresh (no context yet) once per module
  /// loading; "unavailable: <why>" otherwise.
  std::string method;
  std::vector<ledger_probe> probes;

  bool operator==(const ledger_result&) const = default;
};
GPU_BASICS_JSON(ledger_result, method, probes)

// ---- 4. five beliefs -------------------------------------------------------------------------

/// 1. "pin_memory() then a non-blocking copy is always faster".
struct pin_belief {
  std::uint64_t bytes = 0;
  int repeats = 0;                  // transfers of the repeated case
  double pageable_copy_s = 0;       // one cudaMemcpy H2D from pageable memory (median)
  double pin_allocate_s = 0;        // cudaHostAlloc of the staging buffer
  double pin_fill_s = 0;            // memcpy pageable -> pinned
  double pinned_copy_s = 0;         // one cudaMemcpyAsync H2D from pinned + sync (median)
  double pin_then_copy_once_s = 0;  // allocate + fill + copy, measured as one
  /// Of the pageable copies (the other times are taken alongside); absent before the rule.
  std::optional<sampling_outcome> sampling;

  bool operator==(const pin_belief&) const = default;
};
GPU_BASICS_JSON(pin_belief, bytes, repeats, pageable_copy_s, pin_allocate_s, pin_fill_s,
                pinned_copy_s, pin_then_copy_once_s, sampling)

/// 2. Reading a non-blocking D2H destination before synchronising.
struct stale_read_belief {
  std::uint64_t bytes = 0;
  std::uint64_t wrong_before_sync = 0;  // bytes differing from the source, read at once
  std::uint64_t wrong_after_sync = 0;   // after the copy's event
  double delay_s = 0;                   // the kernel queued before the copy (GPU clock)

  bool operator==(const stale_read_belief&) const = default;
};
GPU_BASICS_JSON(stale_read_belief, bytes, wrong_before_sync, wrong_after_sync, delay_s)

/// 3. cudaMallocAsync with a pool release threshold.
struct pool_threshold_row {
  std::uint64_t release_threshold = 0;  // 0 or UINT64_MAX
  double pair_with_sync_s = 0;  // cudaMallocFromPoolAsync + cudaFreeAsync + synchronise (median)
  std::uint64_t reserved_after_sync_bytes = 0;  // the pool's reserved memory after a sync
  std::optional<sampling_outcome> sampling;     // of the pairs; absent before the rule

  bool operator==(const pool_threshold_row&) const = default;
};
GPU_BASICS_JSON(pool_threshold_row, release_threshold, pair_with_sync_s, reserved_after_sync_bytes,
                sampling)

struct pool_belief {
  std::uint64_t bytes = 0;
  int pairs = 0;  // the most timed pairs per row, after one untimed pair
  std::vector<pool_threshold_row> rows;

  bool operator==(const pool_belief&) const = default;
};
GPU_BASICS_JSON(pool_belief, bytes, pairs, rows)

/// 4. NVML's "memory utilisation" beside memory used.
struct nvml_util_belief {
  std::uint64_t idle_allocation_bytes = 0;
  std::uint64_t idle_used_bytes = 0;    // NVML memory used during the idle allocation
  double idle_memory_util_percent = 0;  // median of the samples
  std::uint64_t busy_copy_bytes = 0;    // per D2D copy of the loop
  std::uint64_t busy_used_bytes = 0;
  double busy_memory_util_percent = 0;
  int samples = 0;  // per phase

  bool operator==(const nvml_util_belief&) const = default;
};
GPU_BASICS_JSON(nvml_util_belief, idle_allocation_bytes, idle_used_bytes, idle_memory_util_percent,
                busy_copy_bytes, busy_used_bytes, busy_memory_util_percent, samples)

/// 5. D2D bandwidth against the working set (source + destination).
struct d2d_point {
  std::uint64_t working_set_bytes = 0;
  double bytes_per_s = 0;                    // bytes copied / time (shown copied and read + write)
  std::optional<sampling_outcome> sampling;  // of the timed copy loops; absent before the rule

  bool operator==(const d2d_point&) const = default;
};
GPU_BASICS_JSON(d2d_point, working_set_bytes, bytes_per_s, sampling)

struct d2d_belief {
  std::uint64_t l2_bytes = 0;  // as the device reports it
  std::vector<d2d_point> points;

  bool operator==(const d2d_belief&) const = default;
};
GPU_BASICS_JSON(d2d_belief, l2_bytes, points)

struct beliefs_result {
  std::optional<pin_belief> pin;
  std::optional<stale_read_belief> stale_read;
  std::optional<pool_belief> pool;
  std::optional<nvml_util_belief> nvml_util;  // nullopt without NVML
  std::optional<d2d_belief> d2d;

  bool operator==(const beliefs_result&) const = default;
};
GPU_BASICS_JSON(beliefs_result, pin, stale_read, pool, nvml_util, d2d)

/// The lesson's result; a part is nullopt when it was switched off.
struct unified_result {
  std::optional<managed_result> managed;
  std::optional<zero_copy_result> zero_copy;
  std::optional<ledger_result> ledger;
  std::optional<beliefs_result> beliefs;
  /// Steps shrunk or skipped because other processes used the GPU (shared_gpu.*).
  std::vector<memory_step> memory_steps;

  bool operator==(const unified_result&) const = default;
};
GPU_BASICS_JSON(unified_result, managed, zero_copy, ledger, beliefs, memory_steps)

// ---- figures the notes and the report share --------------------------------------------------

/// Figures course material quotes (an H100 SXM's datasheet): HBM bytes/s and L2 bytes. The notes
/// compare them with the measured GPU's.
inline constexpr double kCourseHbmBytesPerS = 3.35e12;
inline constexpr double kCourseL2Bytes = 50e6;

/// The touch of `direction` and `placement`, or nullptr.
[[nodiscard]] const managed_touch* find_touch(const managed_result& m, std::string_view direction,
                                              std::string_view placement);
/// The row's access pattern as a reader says it: "one pass", "8 passes", "sparse" (the stored
/// key, "one_pass" or "passes", is for programs).
[[nodiscard]] std::string access_name(const zero_copy_row& r);
/// The row of `access`, or nullptr.
[[nodiscard]] const zero_copy_row* find_access(const zero_copy_result& z, std::string_view access);
/// The probe run with `module_loading`, or nullptr.
[[nodiscard]] const ledger_probe* find_probe(const ledger_result& l, std::string_view loading);
/// NVML's used bytes after `step` minus after the step before it (nullopt: no such step).
[[nodiscard]] std::optional<std::int64_t> step_delta(const ledger_probe& p, std::string_view step);
/// Used after the last step minus used at "start": all the process added.
[[nodiscard]] std::int64_t process_bytes(const ledger_probe& p);
/// Median D2D rate over the points whose working set is at most l2 / 2 (the L2 plateau) and at
/// least 4 x l2 (the HBM plateau); nullopt where no point qualifies.
[[nodiscard]] std::optional<double> l2_plateau(const d2d_belief& d);
[[nodiscard]] std::optional<double> hbm_plateau(const d2d_belief& d);

/// Notes for every table present, each with figures from the result.
[[nodiscard]] std::vector<note> explain_unified(const unified_result& r, const device_facts& facts);
/// "managed", "oversubscription", "zero_copy", "host_access", "ledger", "beliefs", "d2d_sweep";
/// a part that is nullopt gives no table. `facts` name the measured GPU in the beliefs table.
[[nodiscard]] std::vector<presentation::table> present_unified(const unified_result& r,
                                                               const device_facts& facts);

/// The registry's entry.
[[nodiscard]] lesson unified_lesson();

}  // namespace gpu_basics::lessons

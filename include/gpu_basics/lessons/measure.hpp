// Measuring the lessons: the CUDA edge of the lessons module (gpu_basics::lessons). Opening the
// GPU for a run, each lesson's measure step, and the registry's lessons with that step set. What
// a result means and how it is shown (explain, present) is host code: the lessons' own headers.
#pragma once
#if defined(GPU_BASICS_HOST_LAYER)
#error "gpu_basics/lessons/measure.hpp measures on the GPU: a host-only target may not include it"
#endif

#include <optional>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/info.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "gpu_basics/lessons/unified.hpp"
#include "gpu_basics/profiler/gemm_runner.hpp"

namespace gpu_basics::lessons {

/// A context for `cfg`: NVML loaded where it can be (else nvml_status says why), the devices
/// queried, cfg.device made current. The CLI calls this so that it makes no CUDA call itself.
/// @throws no_device_error when there is no driver, no GPU, or no GPU cfg.device.
/// @throws cuda_error when the device cannot be made current.
[[nodiscard]] context open_context(const config& cfg);

/// Clears a sticky-free CUDA error left by a failed lesson so that the next one starts clean.
void clear_device_error() noexcept;

/// Every lesson of registry(), in its order, with its measure step set: what the CLI runs.
[[nodiscard]] const std::vector<lesson>& measuring_registry();

/// Reads the GPUs already queried into the context (no GPU work beyond that).
[[nodiscard]] info_result measure_info(context& ctx);

/// Every part on the configured device; with ctx.trace_path, writes the trace of the peak pass,
/// and with ctx.snapshot_path a PyTorch memory snapshot of its allocator after the pass.
/// @throws cuda_error, out_of_memory, io_error.
[[nodiscard]] memory_result measure_memory(context& ctx);

/// Checks that the largest copy fits on the device and the host, then measures every part,
/// the double-buffering and the between-GPUs parts last. Every copy is verified.
/// @throws out_of_memory when the largest copy does not fit; verification_error, cuda_error;
/// nccl_error and io_error from the between-GPUs and double-buffering parts.
[[nodiscard]] transfer_result measure_transfer(context& ctx);

/// Runs the pipelines (every batch checksum verified), writes double_buffer_trace.json and, with
/// --trace, the CUPTI trace. nullopt when transfer.double_buffer.enabled is false.
/// @throws verification_error when a checksum does not match; cuda_error, out_of_memory,
/// io_error.
[[nodiscard]] std::optional<double_buffer_result> measure_double_buffer(context& ctx);

/// Measures every pair of visible GPUs, then the NCCL collectives (where NCCL loads).
/// nullopt when transfer.multi_gpu.enabled is false.
/// @throws verification_error when a copy or collective is wrong; nccl_error when an NCCL call
/// fails; cuda_error, out_of_memory.
[[nodiscard]] std::optional<multi_gpu_result> measure_multi_gpu(context& ctx);

/// Times the kernel three ways, the key-averages workload, the matmuls (each precision checked
/// against the CPU first) under the NVML sampler; writes <output.directory>/profile_samples.csv
/// and, with --trace, the trace.
/// @throws verification_error when a matmul check is off; cuda_error, out_of_memory, io_error.
[[nodiscard]] profile_result measure_profile(context& ctx);

/// A gemm_runner result as the results keep it: its precision, shape, candidates and timings,
/// with the relative error of the precision's check against the CPU and the peak it is judged
/// against (nullopt where unknown). No start or end time.
[[nodiscard]] matmul_run matmul_of(const gemm_result& res, double check_error,
                                   std::optional<double> peak_flops_per_s);

/// Managed memory, zero-copy, the ledger (in child processes of ctx.self_exe) and the beliefs,
/// each part as its unified.*.enabled key says. Every kernel's reads are checked against the data
/// pattern and every copy verified. Sizes are checked against the device's and the host's free
/// memory before a part runs.
/// @throws config_error when a configured size cannot fit (naming the key); verification_error,
/// cuda_error, out_of_memory.
[[nodiscard]] unified_result measure_unified(context& ctx);

/// The ledger's steps in this process, which must not have made a CUDA call yet: NVML's device
/// memory used (the device of PCI bus id `pci_bus_id`) before and after creating the context on
/// `device`, a first allocation, a first kernel, a cuBLASLt handle and GEMM, and caching-allocator
/// blocks. `gpu-basics ledger-probe` runs it and prints it as JSON.
/// @throws no_device_error without NVML (nothing to read); cuda_error, out_of_memory.
[[nodiscard]] ledger_probe run_ledger_probe(int device, const std::string& pci_bus_id);

/// Measures what the checks need on ctx's device and judges it (items filled). A copy that does
/// not verify is a failed check, not an exception.
/// @throws cuda_error, out_of_memory, no_device_error.
[[nodiscard]] check_result measure_check(context& ctx);

}  // namespace gpu_basics::lessons

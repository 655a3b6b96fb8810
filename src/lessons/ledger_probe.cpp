// The memory ledger. A process that has made a CUDA call already holds its context, so the
// context cannot be measured from inside `gpu-basics all` (open_context() makes the device current,
// which creates it). The lesson runs `gpu-basics ledger-probe` instead: a fresh child of the CLI
// reads NVML before its first CUDA call and after each step, once with lazy and once with eager
// module loading, and prints its steps as JSON. The parent waits, idle, meanwhile.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/profiler/gemm_runner.hpp"
#include "unified_measure.hpp"

namespace gpu_basics::lessons {

namespace {

constexpr std::uint64_t kWorkspaceBytes = 64 * kMiB;
constexpr std::uint64_t kFirstAllocationBytes = 2 * kMiB;
constexpr std::uint64_t kBlockBytes = 64 * kMiB;
constexpr int kBlocks = 8;

/// `s` quoted for the shell: '...' with each ' written as '\''.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ledger_probe run_child(const std::string& exe, const std::string& loading, int device,
                       const std::string& bus_id) {
  const std::string cmd = fmt::format("CUDA_MODULE_LOADING={} {} ledger-probe {} {}", loading,
                                      shell_quote(exe), device, shell_quote(bus_id));
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) throw error("ledger: cannot start " + exe + " ledger-probe");
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  const int rc = pclose(pipe.release());
  if (rc != 0)
    throw error(fmt::format("ledger: `{} ledger-probe` ({} module loading) failed (status {}): {}",
                            exe, loading, rc, out.substr(0, 400)));
  // The probe's JSON is its last line (anything before it would be a stray message).
  std::string line = out;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (const auto nl = line.rfind('\n'); nl != std::string::npos) line.erase(0, nl + 1);
  ledger_probe p;
  try {
    read_json(nlohmann::json::parse(line), p);
  } catch (const std::exception& e) {
    throw error(fmt::format("ledger: the probe's output is not a ledger: {}", e.what()));
  }
  return p;
}

}  // namespace

ledger_result measure_ledger(const context& ctx) {
  ledger_result r;
  if (!ctx.self_exe) {
    r.method =
        "unavailable: the ledger runs gpu-basics itself as a fresh child process, and no "
        "gpu-basics executable was given to this run";
    return r;
  }
  if (!ctx.nv) {
    r.method = "unavailable: NVML is not available (" + ctx.nvml_status + ")";
    return r;
  }
  r.method = "child_process";
  for (const char* loading : {"LAZY", "EAGER"})
    r.probes.push_back(run_child(*ctx.self_exe, loading, ctx.cfg.device, ctx.device().pci_bus_id));
  return r;
}

ledger_probe run_ledger_probe(int device, const std::string& pci_bus_id) {
  std::string why;
  const auto nv = nvml::open(&why);
  if (!nv) throw no_device_error("ledger-probe: NVML is not available: " + why);
  const auto d = nv->device_by_pci_bus_id(pci_bus_id);
  if (!d.ok()) throw no_device_error("ledger-probe: NVML does not know the GPU at " + pci_bus_id);
  ledger_probe p;
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  p.module_loading = loading ? loading : "LAZY";
  const auto step = [&](const char* name, const char* label, std::uint64_t requested) {
    const auto m = nv->memory(d.value);
    if (!m.ok())
      throw error(std::string("ledger-probe: NVML's memory reading: ") +
                  std::string(to_string(m.status)));
    p.steps.push_back({name, label, m.value.used_bytes, requested});
  };
  step("start", "process started, no CUDA call yet", 0);
  GPU_BASICS_CUDA_TRY(cudaSetDevice(device));
  GPU_BASICS_CUDA_TRY(cudaFree(nullptr));
  step("context", "CUDA context created (cudaSetDevice)", 0);
  device_buffer first(kFirstAllocationBytes);
  step("first_allocation", "first cudaMalloc (2 MiB)", kFirstAllocationBytes);
  enqueue_fill_pattern(first.data(), first.size(), 1, {});
  GPU_BASICS_CUDA_TRY(cudaDeviceSynchronize());
  step("first_kernel", "first kernel launched (its module loaded)", 0);
  gemm_runner gemm(kWorkspaceBytes);
  p.cublaslt_workspace_bytes = kWorkspaceBytes;
  step("cublaslt_handle", "cuBLASLt handle and its 64 MiB workspace", kWorkspaceBytes);
  (void)gemm.check(gemm_precision::bf16, 256, {});
  step("first_gemm", "first GEMM (256^3 bf16, its operands and kernels)", 0);
  caching_allocator alloc(std::make_shared<cuda_device_backend>());
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.push_back(alloc.allocate(kBlockBytes));
  step("allocator_blocks", "caching allocator: 8 blocks of 64 MiB", kBlocks * kBlockBytes);
  for (int i = 0; i < kBlocks / 2; ++i) alloc.deallocate(blocks[static_cast<std::size_t>(i)]);
  step("allocator_free_half", "caching allocator: 4 of them freed (cached)", 0);
  const auto st = alloc.stats();
  p.allocator_allocated_bytes = st.allocated_bytes.current;
  p.allocator_reserved_bytes = st.reserved_bytes.current;
  for (int i = kBlocks / 2; i < kBlocks; ++i) alloc.deallocate(blocks[static_cast<std::size_t>(i)]);
  return p;
}

}  // namespace gpu_basics::lessons

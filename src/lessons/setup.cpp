#include "gpu_basics/lessons/measure.hpp"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"

namespace gpu_basics::lessons {

context open_context(const config& cfg) {
  context ctx;
  ctx.cfg = cfg;
  (void)visible_device_count();  // no GPU: one clear line before anything else is said
  std::string why;
  ctx.nv = nvml::open(&why);
  ctx.nvml_status = ctx.nv ? "ok" : why;
  if (!ctx.nv) spdlog::info("{}; PCIe link and clock readings are omitted", why);
  ctx.devices = query_devices(ctx.nv.get());
  if (cfg.device >= static_cast<int>(ctx.devices.size()))
    throw no_device_error("device: " + std::to_string(cfg.device) + " does not exist: " +
                          std::to_string(ctx.devices.size()) + " GPU(s) visible (indices 0.." +
                          std::to_string(ctx.devices.size() - 1) + ")");
  GPU_BASICS_CUDA_TRY(cudaSetDevice(cfg.device));
  return ctx;
}

void clear_device_error() noexcept {
  (void)cudaGetLastError();
}

}  // namespace gpu_basics::lessons

// What every subcommand receives, and the subcommands' entry points. Lessons measure through the
// library and return a report; main prints and writes it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/profiler/nvml.hpp"

namespace gpu_basics::cli {

struct context {
  config cfg;
  std::shared_ptr<nvml> nv;  // null when NVML is unavailable
  std::string nvml_status;   // "ok" or why not
  std::vector<device_info> devices;
  std::optional<std::string> trace_path;  // --trace: the lesson writes a trace there

  [[nodiscard]] const device_info& device() const { return devices.at(static_cast<std::size_t>(cfg.device)); }
};

report run_info(context& ctx);
report run_transfer(context& ctx);
report run_memory(context& ctx);
report run_profile(context& ctx);
/// Appends the double-buffering table to the transfer report (transfer.double_buffer).
void add_double_buffer(context& ctx, report& r);
/// Appends the peer-to-peer matrices and NCCL collectives to the transfer report
/// (transfer.multi_gpu).
void add_multi_gpu(context& ctx, report& r);

}  // namespace gpu_basics::cli

// Hardware ceilings: PCIe link rates from generation and width, and datasheet peaks of known
// GPUs. Host-only facts and arithmetic, so lessons can say how far a figure is from the ceiling.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpu_basics {

/// Theoretical one-direction payload rate of a PCIe link after line encoding, in bytes/s
/// (Gen1–2: 8b/10b; Gen3–5: 128b/130b; Gen6: 242/256 FLIT). nullopt for unknown generations or
/// widths that are not 1..32. Gen5 x16 ≈ 63.0 GB/s.
[[nodiscard]] std::optional<double> pcie_link_bytes_per_s(unsigned generation, unsigned width);

/// Datasheet figures of a known GPU (dense tensor-core rates, no sparsity).
struct gpu_datasheet {
  std::string_view name;
  double hbm_bytes_per_s;
  double fp16_flops;
  double bf16_flops;
  double tf32_flops;
  double fp32_flops;
  std::string_view source;
};

/// Matches a CUDA device name ("NVIDIA H200", "NVIDIA H100 80GB HBM3"); nullopt if unknown.
[[nodiscard]] std::optional<gpu_datasheet> find_datasheet(std::string_view device_name);

}  // namespace gpu_basics

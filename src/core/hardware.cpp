#include "gpu_basics/core/hardware.hpp"

#include <array>

namespace gpu_basics {

namespace {
/// Per PCIe generation (1 to 6): the lane rate in transfers/s and the line-code efficiency.
struct pcie_generation {
  double gt_per_s;
  double efficiency;
};
constexpr std::array<pcie_generation, 6> kPcie = {{
    {2.5e9, 8.0 / 10.0},
    {5.0e9, 8.0 / 10.0},
    {8.0e9, 128.0 / 130.0},
    {16.0e9, 128.0 / 130.0},
    {32.0e9, 128.0 / 130.0},
    {64.0e9, 242.0 / 256.0},
}};
}  // namespace

std::optional<double> pcie_link_bytes_per_s(unsigned generation, unsigned width) {
  if (width < 1 || width > 32) return std::nullopt;
  if (generation < 1 || generation > kPcie.size()) return std::nullopt;
  const pcie_generation& g = kPcie[generation - 1];
  return g.gt_per_s * g.efficiency * static_cast<double>(width) / 8.0;
}

namespace {
// NVIDIA datasheets (SXM parts, dense). H200: 4.8 TB/s HBM3e, same tensor rates as H100 SXM.
constexpr std::array<gpu_datasheet, 4> kKnown = {{
    {"H200", 4.8e12, 989e12, 989e12, 494e12, 67e12, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"},
    {"H100 80GB HBM3", 3.35e12, 989e12, 989e12, 494e12, 67e12, "NVIDIA H100 datasheet (SXM)"},
    {"H100 PCIe", 2.0e12, 756e12, 756e12, 378e12, 51e12, "NVIDIA H100 datasheet (PCIe)"},
    {"A100-SXM4-80GB", 2.039e12, 312e12, 312e12, 156e12, 19.5e12,
     "NVIDIA A100 datasheet (SXM 80GB)"},
}};
}  // namespace

std::optional<gpu_datasheet> find_datasheet(std::string_view device_name) {
  for (const auto& g : kKnown)
    if (device_name.find(g.name) != std::string_view::npos) return g;
  return std::nullopt;
}

}  // namespace gpu_basics

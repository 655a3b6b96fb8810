// `gpu-basics info`: what each visible GPU is, and what its figures mean for the lessons.
#include <fmt/format.h>

#include "gpu_basics/core/hardware.hpp"
#include "lesson.hpp"

namespace gpu_basics::cli {

namespace {
template <class T>
value opt_value(const std::optional<T>& v) {
  if (!v) return std::monostate{};
  return static_cast<std::int64_t>(*v);
}
}  // namespace

report run_info(context& ctx) {
  report r;
  r.command = "info";
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : ctx.devices) {
    gpus.push_back(d);
    table t;
    t.id = "gpu" + std::to_string(d.index);
    t.title = fmt::format("GPU {}: {} ({})", d.index, d.name, d.pci_bus_id);
    t.columns = {{"property", "property"}, {"value", "value"}, {"unit", "unit"}};
    const auto row = [&](std::string p, value v, std::string unit) {
      t.add_row({std::move(p), std::move(v), std::move(unit)});
    };
    const auto mib = [](std::uint64_t b) { return fmt::format("{:.1f}", static_cast<double>(b) / (1 << 20)); };
    const auto gib = [](std::uint64_t b) { return fmt::format("{:.1f}", static_cast<double>(b) / (1ull << 30)); };
    row("compute capability", fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor), "");
    row("streaming multiprocessors", static_cast<std::int64_t>(d.sm_count), "");
    row("L2 cache", mib(d.l2_cache_bytes), "MiB");
    row("device memory (total)", gib(d.total_memory_bytes), "GiB");
    row("device memory (free now)", gib(d.free_memory_bytes), "GiB");
    row("memory bus width", static_cast<std::int64_t>(d.memory_bus_width_bits), "bit");
    row("copy engines", static_cast<std::int64_t>(d.copy_engines), "");
    row("max SM clock", static_cast<std::int64_t>(d.max_sm_clock_mhz), "MHz");
    row("max memory clock", static_cast<std::int64_t>(d.max_memory_clock_mhz), "MHz");
    row("SM clock now", opt_value(d.sm_clock_current_mhz), "MHz");
    row("ECC", d.ecc_enabled, "");
    row("driver", d.driver_version ? value(*d.driver_version) : value(std::monostate{}), "");
    row("CUDA driver API", cuda_version_string(d.driver_api_version), "");
    row("CUDA runtime", cuda_version_string(d.runtime_version), "");
    const auto link_str = [](const std::optional<unsigned>& g, const std::optional<unsigned>& w) -> value {
      if (!g || !w) return std::monostate{};
      return fmt::format("Gen{} x{}", *g, *w);
    };
    row("PCIe link (max)", link_str(d.pcie_generation_max, d.pcie_width_max), "");
    row("PCIe link (now)", link_str(d.pcie_generation_current, d.pcie_width_current), "");
    const auto link = device_link_bytes_per_s(d);
    row("PCIe rate per direction (theoretical)",
        link ? value(fmt::format("{:.1f}", *link / 1e9)) : value(std::monostate{}), "GB/s");
    const auto sheet = find_datasheet(d.name);
    row("HBM bandwidth (datasheet)",
        sheet ? value(fmt::format("{:.2f}", sheet->hbm_bytes_per_s / 1e12)) : value(std::monostate{}),
        "TB/s");
    row("power limit", d.power_limit_mw ? value(fmt::format("{:.0f}", *d.power_limit_mw / 1000.0)) : value(std::monostate{}), "W");

    t.notes.push_back(fmt::format(
        "- {} copy engines: a host-to-device copy, a device-to-host copy and kernels can all run "
        "at once; `gpu-basics transfer` shows what that buys.",
        d.copy_engines));
    if (link)
      t.notes.push_back(fmt::format(
          "- The PCIe link caps host<->device copies at {:.1f} GB/s per direction after line "
          "encoding; packet headers leave real copies a few percent below that.",
          *link / 1e9));
    if (d.pcie_generation_current && d.pcie_generation_max &&
        *d.pcie_generation_current < *d.pcie_generation_max)
      t.notes.push_back(
          "- The link runs below its maximum generation now: an idle GPU lowers it to save power "
          "and raises it again under load.");
    if (sheet)
      t.notes.push_back(fmt::format(
          "- Device memory bandwidth ({:.2f} TB/s by the datasheet) is ~{:.0f}x the PCIe link: "
          "keep data on the GPU and move it across PCIe once.",
          sheet->hbm_bytes_per_s / 1e12, link ? sheet->hbm_bytes_per_s / *link : 0.0));
    if (!ctx.nv) t.notes.push_back("- " + ctx.nvml_status + ": link, clock and power rows are n/a.");
    r.tables.push_back(std::move(t));
  }
  r.extra["gpus"] = gpus;
  return r;
}

}  // namespace gpu_basics::cli

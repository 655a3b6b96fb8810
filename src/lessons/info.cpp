#include "gpu_basics/lessons/info.hpp"

#include <fmt/format.h>

#include "gpu_basics/core/hardware.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

template <class T>
value opt_value(const std::optional<T>& v) {
  if (!v) return std::monostate{};
  return static_cast<std::int64_t>(*v);
}

value link_text(const std::optional<unsigned>& g, const std::optional<unsigned>& w) {
  if (!g || !w) return std::monostate{};
  return fmt::format("Gen{} x{}", *g, *w);
}

std::string table_id(const device_info& d) {
  return "gpu" + std::to_string(d.index);
}

table device_table(const device_info& d) {
  table t;
  t.id = table_id(d);
  t.title = fmt::format("GPU {}: {} ({})", d.index, d.name, d.pci_bus_id);
  t.columns = {{"property", "property"}, {"value", "value"}, {"unit", "unit"}};
  const auto row = [&](std::string p, value v, std::string unit) {
    t.add_row({std::move(p), std::move(v), std::move(unit)});
  };
  const auto mib = [](std::uint64_t b) {
    return fmt::format("{:.1f}", static_cast<double>(b) / (1 << 20));
  };
  const auto gib = [](std::uint64_t b) {
    return fmt::format("{:.1f}", static_cast<double>(b) / (1ull << 30));
  };
  const auto i64 = [](auto v) { return static_cast<std::int64_t>(v); };
  row("compute capability",
      fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor), "");
  row("streaming multiprocessors", i64(d.sm_count), "");
  row("L2 cache", mib(d.l2_cache_bytes), "MiB");
  row("device memory (total)", gib(d.total_memory_bytes), "GiB");
  row("device memory (free now)", gib(d.free_memory_bytes), "GiB");
  row("memory bus width", i64(d.memory_bus_width_bits), "bit");
  row("copy engines", i64(d.copy_engines), "");
  row("max SM clock", i64(d.max_sm_clock_mhz), "MHz");
  row("max memory clock", i64(d.max_memory_clock_mhz), "MHz");
  row("SM clock now", opt_value(d.sm_clock_current_mhz), "MHz");
  row("ECC", d.ecc_enabled, "");
  row("driver", d.driver_version ? value(*d.driver_version) : value(std::monostate{}), "");
  row("CUDA driver API", cuda_version_string(d.driver_api_version), "");
  row("CUDA runtime", cuda_version_string(d.runtime_version), "");
  row("PCIe link (max)", link_text(d.pcie_generation_max, d.pcie_width_max), "");
  row("PCIe link (now)", link_text(d.pcie_generation_current, d.pcie_width_current), "");
  const auto link = device_link_bytes_per_s(d);
  row("PCIe rate per direction (theoretical)",
      link ? value(fmt::format("{:.1f}", *link / 1e9)) : value(std::monostate{}), "GB/s");
  const auto sheet = find_datasheet(d.name);
  row("HBM bandwidth (datasheet)",
      sheet ? value(fmt::format("{:.2f}", sheet->hbm_bytes_per_s / 1e12)) : value(std::monostate{}),
      "TB/s");
  row("power limit",
      d.power_limit_mw ? value(fmt::format("{:.0f}", *d.power_limit_mw / 1000.0))
                       : value(std::monostate{}),
      "W");
  return t;
}

std::vector<note> device_notes(const device_info& d, const std::string& nvml_status) {
  const std::string id = table_id(d);
  std::vector<note> n;
  // asyncEngineCount: 2 or more lets both directions and kernels overlap, 1 only a copy beside
  // kernels, 0 nothing.
  if (d.copy_engines >= 2)
    n.push_back({id, fmt::format("- {} copy engines: a host-to-device copy, a device-to-host copy "
                                 "and kernels can all run at once; `gpu-basics transfer` shows "
                                 "what that buys.",
                                 d.copy_engines)});
  else if (d.copy_engines == 1)
    n.push_back({id,
                 "- 1 copy engine: a copy can run beside kernels, but host-to-device and "
                 "device-to-host copies take turns; `gpu-basics transfer` shows what that "
                 "costs."});
  else
    n.push_back({id, "- No copy engine runs beside kernels here: copies and kernels take turns."});
  const auto link = device_link_bytes_per_s(d);
  if (link)
    n.push_back(
        {id,
         fmt::format(
             "- The PCIe link caps host<->device copies at {:.1f} GB/s per direction after line "
             "encoding; packet headers leave real copies a few percent below that.",
             *link / 1e9)});
  if (d.pcie_generation_current && d.pcie_generation_max &&
      *d.pcie_generation_current < *d.pcie_generation_max)
    n.push_back(
        {id,
         "- The link runs below its maximum generation now: an idle GPU lowers it to save power "
         "and raises it again under load."});
  if (const auto sheet = find_datasheet(d.name))
    n.push_back({id, fmt::format("- Device memory bandwidth ({:.2f} TB/s, {}; reads and writes "
                                 "together, as D2D rates are shown read + write) is ~{:.0f}x the "
                                 "PCIe link: keep data on the GPU and move it across PCIe once.",
                                 sheet->hbm_bytes_per_s / 1e12, sheet->source,
                                 link ? sheet->hbm_bytes_per_s / *link : 0.0)});
  if (nvml_status != "ok")
    n.push_back({id, "- " + nvml_status + ": link, clock and power rows are n/a."});
  return n;
}

}  // namespace

std::vector<note> explain_info(const info_result& r, const device_facts&) {
  std::vector<note> n;
  for (const auto& d : r.gpus) {
    auto dn = device_notes(d, r.nvml_status);
    n.insert(n.end(), dn.begin(), dn.end());
  }
  return n;
}

std::vector<table> present_info(const info_result& r) {
  std::vector<table> out;
  for (const auto& d : r.gpus) out.push_back(device_table(d));
  return out;
}

lesson info_lesson() {
  lesson l;
  l.name = "info";
  l.description =
      "Every visible GPU: name, compute capability, SMs, L2, memory, copy engines, clocks, driver "
      "and runtime, PCIe link";
  l.traces = false;
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    return render_typed<info_result, explain_info, present_info>(j, f, "info");
  };
  l.upgrade_v1 = [](const nlohmann::json& block) { return nlohmann::json(info_from_v1(block)); };
  return l;
}

}  // namespace gpu_basics::lessons

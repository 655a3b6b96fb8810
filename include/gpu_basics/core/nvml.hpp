// NVML, loaded at run time with dlopen (no nvml.h at build time, no link dependency). Without
// the library or a driver, open() says why and callers go on without NVML. Each reading carries
// a status, so "not supported" and "no permission" are told apart from a value. In core: the
// device queries (device_info) and the profiler's sampler both read it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpu_basics {

enum class metric_status { ok, not_supported, no_permission, unavailable, error };

/// "ok", "not supported", "no permission", "unavailable", "error".
[[nodiscard]] std::string_view to_string(metric_status s) noexcept;

template <class T>
struct reading {
  metric_status status = metric_status::unavailable;
  T value{};
  /// Whether `value` holds a reading.
  [[nodiscard]] bool ok() const noexcept { return status == metric_status::ok; }
  /// The value when ok(), else nullopt.
  [[nodiscard]] std::optional<T> get() const {
    return ok() ? std::optional<T>(value) : std::nullopt;
  }
};

/// Opaque NVML device handle.
struct nvml_device {
  void* handle = nullptr;
};

/// Which clock a clock reading refers to (values match NVML's nvmlClockType_t).
enum class nvml_clock : unsigned { graphics = 0, sm = 1, memory = 2, video = 3 };

struct nvml_memory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t used_bytes = 0;
};

struct nvml_utilization {
  unsigned gpu_percent = 0;
  unsigned memory_percent = 0;
};

/// Row remapping (Ampere and later; nvmlDeviceGetRemappedRows).
struct nvml_remapped_rows {
  unsigned correctable = 0;    // rows remapped after correctable errors
  unsigned uncorrectable = 0;  // rows remapped after uncorrectable errors
  bool pending = false;        // a remap waits for the next GPU reset
  bool failure = false;        // a remap failed: no spare row was left
};

/// A process with a compute context on a device (nvmlDeviceGetComputeRunningProcesses).
struct nvml_process {
  unsigned pid = 0;  // in the driver's PID namespace, which need not be this process's
  std::optional<std::uint64_t> used_bytes;  // nullopt where the driver cannot say
};

/// A loaded and initialised NVML. Thread-safe as NVML itself is.
class nvml {
 public:
  /// Loads libnvidia-ml.so.1 and calls nvmlInit. Returns nullptr and sets *reason on failure.
  static std::shared_ptr<nvml> open(std::string* reason);
  /// Calls nvmlShutdown, then closes the library.
  ~nvml();
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;

  // Readings: each carries a status instead of throwing; "not supported" also where the driver
  // lacks the entry point.
  /// The driver's version string.
  [[nodiscard]] reading<std::string> driver_version() const;
  /// The device with a PCI bus id as the CUDA runtime writes it ("0000:19:00.0").
  [[nodiscard]] reading<nvml_device> device_by_pci_bus_id(const std::string& bus_id) const;
  /// The device at NVML's index (NVML's order, which need not be CUDA's).
  [[nodiscard]] reading<nvml_device> device_by_index(unsigned index) const;
  /// The device's product name.
  [[nodiscard]] reading<std::string> name(nvml_device d) const;

  /// The PCIe generation the link runs at now (it can drop while the GPU idles).
  [[nodiscard]] reading<unsigned> pcie_link_generation(nvml_device d) const;  // current
  /// The highest PCIe generation the link supports.
  [[nodiscard]] reading<unsigned> pcie_link_generation_max(nvml_device d) const;  // of the link
  /// The PCIe lanes in use now.
  [[nodiscard]] reading<unsigned> pcie_link_width(nvml_device d) const;
  /// The most PCIe lanes the link supports.
  [[nodiscard]] reading<unsigned> pcie_link_width_max(nvml_device d) const;
  /// Clock `c` now, MHz.
  [[nodiscard]] reading<unsigned> clock_mhz(nvml_device d, nvml_clock c) const;
  /// The highest clock `c` can reach, MHz.
  [[nodiscard]] reading<unsigned> max_clock_mhz(nvml_device d, nvml_clock c) const;
  /// The power management limit, mW.
  [[nodiscard]] reading<unsigned> power_limit_mw(nvml_device d) const;
  /// The power draw now, mW.
  [[nodiscard]] reading<unsigned> power_usage_mw(nvml_device d) const;
  /// The GPU temperature, °C.
  [[nodiscard]] reading<unsigned> temperature_c(nvml_device d) const;
  /// Energy used since the driver loaded, mJ (milliseconds of CPU per read).
  [[nodiscard]] reading<std::uint64_t> energy_mj(nvml_device d) const;
  /// Total, free and used device memory, bytes.
  [[nodiscard]] reading<nvml_memory> memory(nvml_device d) const;
  /// GPU and memory utilization, percent over the driver's last sample period.
  [[nodiscard]] reading<nvml_utilization> utilization(nvml_device d) const;
  /// PCIe throughput over NVML's last 20 ms window, KB/s; tx = device → host.
  [[nodiscard]] reading<unsigned> pcie_tx_kbps(nvml_device d) const;
  /// The same for rx = host → device.
  [[nodiscard]] reading<unsigned> pcie_rx_kbps(nvml_device d) const;
  /// Bitmask of clock-event (throttle) reasons.
  [[nodiscard]] reading<std::uint64_t> clock_event_reasons(nvml_device d) const;
  /// Uncorrectable ECC errors since the driver loaded (volatile) or over the GPU's life
  /// (aggregate). Not supported where ECC is off or the GPU has none.
  [[nodiscard]] reading<std::uint64_t> ecc_uncorrected(nvml_device d, bool aggregate) const;
  /// Pages retired after double-bit or repeated single-bit errors (pre-Ampere GPUs; newer ones
  /// remap rows instead and say "not supported").
  [[nodiscard]] reading<unsigned> retired_pages(nvml_device d) const;
  /// Whether a page retirement waits for the next reset.
  [[nodiscard]] reading<bool> retired_pages_pending(nvml_device d) const;
  /// Row-remapping counters and flags.
  [[nodiscard]] reading<nvml_remapped_rows> remapped_rows(nvml_device d) const;
  /// The processes with a compute context on the device, this one included.
  [[nodiscard]] reading<std::vector<nvml_process>> compute_processes(nvml_device d) const;

  struct api;  // function table, defined in the implementation

 private:
  explicit nvml(std::unique_ptr<api> a);
  std::unique_ptr<api> api_;
};

}  // namespace gpu_basics

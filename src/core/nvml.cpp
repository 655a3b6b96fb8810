#include "gpu_basics/core/nvml.hpp"

#include <array>

#include "gpu_basics/core/dynamic_library.hpp"
#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

// The subset of NVML's C API used here, declared from its documented ABI.
namespace {
using nvml_return = int;
constexpr nvml_return kSuccess = 0;
constexpr nvml_return kNotSupported = 3;
constexpr nvml_return kNoPermission = 4;
constexpr nvml_return kInsufficientSize = 7;
constexpr nvml_return kFunctionNotFound = 13;
using nvml_handle = void*;
struct nvml_memory_raw {
  unsigned long long total, free, used;
};
struct nvml_utilization_raw {
  unsigned gpu, memory;
};
constexpr unsigned kTemperatureGpu = 0;
constexpr unsigned kPcieTx = 0;
constexpr unsigned kPcieRx = 1;
// nvmlMemoryErrorType_t: NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1; nvmlEccCounterType_t:
// NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1; nvmlPageRetirementCause_t:
// NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0, ..._DOUBLE_BIT_ECC_ERROR = 1;
// nvmlEnableState_t: NVML_FEATURE_ENABLED = 1 (NVML API reference).
constexpr unsigned kEccUncorrected = 1;
constexpr unsigned kEccVolatile = 0;
constexpr unsigned kEccAggregate = 1;
constexpr unsigned kRetiredCauses[] = {0, 1};
constexpr unsigned kFeatureEnabled = 1;
}  // namespace

struct nvml::api {
  dynamic_library lib;
  nvml_return (*init)() = nullptr;
  nvml_return (*shutdown)() = nullptr;
  const char* (*error_string)(nvml_return) = nullptr;
  nvml_return (*system_driver_version)(char*, unsigned) = nullptr;
  nvml_return (*by_pci)(const char*, nvml_handle*) = nullptr;
  nvml_return (*by_index)(unsigned, nvml_handle*) = nullptr;
  nvml_return (*name)(nvml_handle, char*, unsigned) = nullptr;
  nvml_return (*pcie_gen)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*pcie_gen_max)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*pcie_width)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*pcie_width_max)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*clock)(nvml_handle, unsigned, unsigned*) = nullptr;
  nvml_return (*max_clock)(nvml_handle, unsigned, unsigned*) = nullptr;
  nvml_return (*power_limit)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*power_usage)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*temperature)(nvml_handle, unsigned, unsigned*) = nullptr;
  nvml_return (*energy)(nvml_handle, unsigned long long*) = nullptr;
  nvml_return (*memory)(nvml_handle, nvml_memory_raw*) = nullptr;
  nvml_return (*utilization)(nvml_handle, nvml_utilization_raw*) = nullptr;
  nvml_return (*pcie_throughput)(nvml_handle, unsigned, unsigned*) = nullptr;
  nvml_return (*clock_reasons)(nvml_handle, unsigned long long*) = nullptr;
  nvml_return (*ecc_total)(nvml_handle, unsigned, unsigned, unsigned long long*) = nullptr;
  nvml_return (*retired_pages)(nvml_handle, unsigned, unsigned*, unsigned long long*) = nullptr;
  nvml_return (*retired_pending)(nvml_handle, unsigned*) = nullptr;
  nvml_return (*remapped_rows)(nvml_handle, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
};

namespace {
metric_status status_of(nvml_return r) {
  switch (r) {
    case kSuccess:
      return metric_status::ok;
    case kNotSupported:
    case kFunctionNotFound:
      return metric_status::not_supported;
    case kNoPermission:
      return metric_status::no_permission;
    default:
      return metric_status::error;
  }
}

template <class T, class Fn, class... Args>
reading<T> read_value(Fn fn, Args... args) {
  reading<T> r;
  if (!fn) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(fn(args..., &r.value));
  return r;
}
}  // namespace

std::string_view to_string(metric_status s) noexcept {
  switch (s) {
    case metric_status::ok:
      return "ok";
    case metric_status::not_supported:
      return "not supported";
    case metric_status::no_permission:
      return "no permission";
    case metric_status::unavailable:
      return "unavailable";
    case metric_status::error:
      return "error";
  }
  return "?";
}

std::shared_ptr<nvml> nvml::open(std::string* reason) {
  auto a = std::make_unique<api>();
  try {
    a->lib = dynamic_library({"libnvidia-ml.so.1"});
  } catch (const error&) {
    if (reason) *reason = "NVML not available: libnvidia-ml.so.1 not found (no NVIDIA driver?)";
    return nullptr;
  }
  const dynamic_library& lib = a->lib;
  try {
    // Newest symbol version first; older drivers export the earlier ones.
    lib.bind_required(a->init, {"nvmlInit_v2", "nvmlInit"});
    lib.bind_required(a->shutdown, {"nvmlShutdown"});
  } catch (const error& e) {
    if (reason) *reason = std::string("NVML not available: ") + e.what();
    return nullptr;
  }
  // The rest may be missing from old drivers: their readings say "not supported".
  lib.bind(a->error_string, {"nvmlErrorString"});
  lib.bind(a->system_driver_version, {"nvmlSystemGetDriverVersion"});
  lib.bind(a->by_pci, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"});
  lib.bind(a->by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  lib.bind(a->name, {"nvmlDeviceGetName"});
  lib.bind(a->pcie_gen, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  lib.bind(a->pcie_gen_max, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  lib.bind(a->pcie_width, {"nvmlDeviceGetCurrPcieLinkWidth"});
  lib.bind(a->pcie_width_max, {"nvmlDeviceGetMaxPcieLinkWidth"});
  lib.bind(a->clock, {"nvmlDeviceGetClockInfo"});
  lib.bind(a->max_clock, {"nvmlDeviceGetMaxClockInfo"});
  lib.bind(a->power_limit, {"nvmlDeviceGetPowerManagementLimit"});
  lib.bind(a->power_usage, {"nvmlDeviceGetPowerUsage"});
  lib.bind(a->temperature, {"nvmlDeviceGetTemperature"});
  lib.bind(a->energy, {"nvmlDeviceGetTotalEnergyConsumption"});
  lib.bind(a->memory, {"nvmlDeviceGetMemoryInfo"});
  lib.bind(a->utilization, {"nvmlDeviceGetUtilizationRates"});
  lib.bind(a->pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  lib.bind(a->clock_reasons,
           {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  lib.bind(a->ecc_total, {"nvmlDeviceGetTotalEccErrors"});
  lib.bind(a->retired_pages, {"nvmlDeviceGetRetiredPages"});
  lib.bind(a->retired_pending, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  lib.bind(a->remapped_rows, {"nvmlDeviceGetRemappedRows"});
  const nvml_return r = a->init();
  if (r != kSuccess) {
    if (reason)
      *reason = std::string("NVML not available: nvmlInit failed: ") +
                (a->error_string ? a->error_string(r) : std::to_string(r).c_str());
    return nullptr;
  }
  return std::shared_ptr<nvml>(new nvml(std::move(a)));
}

nvml::nvml(std::unique_ptr<api> a) : api_(std::move(a)) {}

nvml::~nvml() {
  api_->shutdown();
}  // then api_ closes the library

reading<std::string> nvml::driver_version() const {
  reading<std::string> r;
  std::array<char, 96> buf{};
  if (!api_->system_driver_version) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->system_driver_version(buf.data(), buf.size()));
  if (r.ok()) r.value = buf.data();
  return r;
}

reading<nvml_device> nvml::device_by_pci_bus_id(const std::string& bus_id) const {
  reading<nvml_device> r;
  if (!api_->by_pci) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->by_pci(bus_id.c_str(), &r.value.handle));
  return r;
}

reading<nvml_device> nvml::device_by_index(unsigned index) const {
  reading<nvml_device> r;
  if (!api_->by_index) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->by_index(index, &r.value.handle));
  return r;
}

reading<std::string> nvml::name(nvml_device d) const {
  reading<std::string> r;
  std::array<char, 96> buf{};
  if (!api_->name) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->name(d.handle, buf.data(), buf.size()));
  if (r.ok()) r.value = buf.data();
  return r;
}

reading<unsigned> nvml::pcie_link_generation(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_gen, d.handle);
}
reading<unsigned> nvml::pcie_link_generation_max(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_gen_max, d.handle);
}
reading<unsigned> nvml::pcie_link_width(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_width, d.handle);
}
reading<unsigned> nvml::pcie_link_width_max(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_width_max, d.handle);
}
reading<unsigned> nvml::clock_mhz(nvml_device d, nvml_clock c) const {
  return read_value<unsigned>(api_->clock, d.handle, static_cast<unsigned>(c));
}
reading<unsigned> nvml::max_clock_mhz(nvml_device d, nvml_clock c) const {
  return read_value<unsigned>(api_->max_clock, d.handle, static_cast<unsigned>(c));
}
reading<unsigned> nvml::power_limit_mw(nvml_device d) const {
  return read_value<unsigned>(api_->power_limit, d.handle);
}
reading<unsigned> nvml::power_usage_mw(nvml_device d) const {
  return read_value<unsigned>(api_->power_usage, d.handle);
}
reading<unsigned> nvml::temperature_c(nvml_device d) const {
  return read_value<unsigned>(api_->temperature, d.handle, kTemperatureGpu);
}
reading<std::uint64_t> nvml::energy_mj(nvml_device d) const {
  reading<std::uint64_t> r;
  unsigned long long v = 0;
  if (!api_->energy) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->energy(d.handle, &v));
  r.value = v;
  return r;
}
reading<nvml_memory> nvml::memory(nvml_device d) const {
  reading<nvml_memory> r;
  nvml_memory_raw m{};
  if (!api_->memory) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->memory(d.handle, &m));
  r.value = {m.total, m.free, m.used};
  return r;
}
reading<nvml_utilization> nvml::utilization(nvml_device d) const {
  reading<nvml_utilization> r;
  nvml_utilization_raw u{};
  if (!api_->utilization) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->utilization(d.handle, &u));
  r.value = {u.gpu, u.memory};
  return r;
}
reading<unsigned> nvml::pcie_tx_kbps(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_throughput, d.handle, kPcieTx);
}
reading<unsigned> nvml::pcie_rx_kbps(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_throughput, d.handle, kPcieRx);
}
reading<std::uint64_t> nvml::clock_event_reasons(nvml_device d) const {
  reading<std::uint64_t> r;
  unsigned long long v = 0;
  if (!api_->clock_reasons) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->clock_reasons(d.handle, &v));
  r.value = v;
  return r;
}

reading<std::uint64_t> nvml::ecc_uncorrected(nvml_device d, bool aggregate) const {
  reading<std::uint64_t> r;
  unsigned long long v = 0;
  if (!api_->ecc_total) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(
      api_->ecc_total(d.handle, kEccUncorrected, aggregate ? kEccAggregate : kEccVolatile, &v));
  r.value = v;
  return r;
}
reading<unsigned> nvml::retired_pages(nvml_device d) const {
  reading<unsigned> r;
  if (!api_->retired_pages) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = metric_status::ok;
  for (const unsigned cause : kRetiredCauses) {
    // A count of 0 asks for the number only: success means none, "insufficient size" some.
    unsigned count = 0;
    const nvml_return rc = api_->retired_pages(d.handle, cause, &count, nullptr);
    if (rc != kSuccess && rc != kInsufficientSize) {
      r.status = status_of(rc);
      return r;
    }
    r.value += count;
  }
  return r;
}
reading<bool> nvml::retired_pages_pending(nvml_device d) const {
  reading<bool> r;
  unsigned state = 0;
  if (!api_->retired_pending) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->retired_pending(d.handle, &state));
  r.value = state == kFeatureEnabled;
  return r;
}
reading<nvml_remapped_rows> nvml::remapped_rows(nvml_device d) const {
  reading<nvml_remapped_rows> r;
  unsigned corr = 0, unc = 0, pending = 0, failure = 0;
  if (!api_->remapped_rows) {
    r.status = metric_status::not_supported;
    return r;
  }
  r.status = status_of(api_->remapped_rows(d.handle, &corr, &unc, &pending, &failure));
  r.value = {corr, unc, pending != 0, failure != 0};
  return r;
}

}  // namespace gpu_basics

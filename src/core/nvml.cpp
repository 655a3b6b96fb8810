#include "gpu_basics/core/nvml.hpp"

#include <array>
#include <cstring>

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
// nvmlProcessInfo_t of the _v2 and _v3 entry points (the same layout); usedGpuMemory is
// NVML_VALUE_NOT_AVAILABLE (all ones) where the driver cannot say.
struct nvml_process_raw {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance, compute_instance;
};
constexpr unsigned long long kValueNotAvailable = ~0ull;
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
  nvml_return (*processes)(nvml_handle, unsigned*, nvml_process_raw*) = nullptr;
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

/// The one way an NVML getter becomes a reading: "not supported" where the driver lacks `fn`,
/// else the status of call(fn, raw) on a zeroed Raw and, when it is ok, convert(raw) as the value.
template <class T, class Raw, class Fn, class Call, class Convert>
reading<T> read_with(Fn fn, Call call, Convert convert) {
  reading<T> r;
  if (!fn) {
    r.status = metric_status::not_supported;
    return r;
  }
  Raw raw{};
  r.status = status_of(call(fn, raw));
  if (r.ok()) r.value = convert(raw);
  return r;
}

/// NVML's value as the reading's type: numbers widen, structs are taken member by member.
template <class T, class Raw>
T from_raw(const Raw& raw) {
  return static_cast<T>(raw);
}
template <>
nvml_device from_raw<nvml_device, nvml_handle>(const nvml_handle& h) {
  return {h};
}
template <>
nvml_memory from_raw<nvml_memory, nvml_memory_raw>(const nvml_memory_raw& m) {
  return {m.total, m.free, m.used};
}
template <>
nvml_utilization from_raw<nvml_utilization, nvml_utilization_raw>(const nvml_utilization_raw& u) {
  return {u.gpu, u.memory};
}

/// fn(args..., &raw) read as T.
template <class T, class Raw = T, class Fn, class... Args>
reading<T> read_value(Fn fn, Args... args) {
  return read_with<T, Raw>(
      fn, [&](Fn f, Raw& raw) { return f(args..., &raw); }, from_raw<T, Raw>);
}

/// fn(args..., buffer, size) read as the text it writes into the buffer.
template <class Fn, class... Args>
reading<std::string> read_text(Fn fn, Args... args) {
  using buffer = std::array<char, 96>;
  return read_with<std::string, buffer>(
      fn, [&](Fn f, buffer& b) { return f(args..., b.data(), static_cast<unsigned>(b.size())); },
      [](const buffer& b) { return std::string(b.data(), strnlen(b.data(), b.size())); });
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
  lib.bind(a->processes,
           {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
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
  return read_text(api_->system_driver_version);
}

reading<nvml_device> nvml::device_by_pci_bus_id(const std::string& bus_id) const {
  return read_value<nvml_device, nvml_handle>(api_->by_pci, bus_id.c_str());
}

reading<nvml_device> nvml::device_by_index(unsigned index) const {
  return read_value<nvml_device, nvml_handle>(api_->by_index, index);
}

reading<std::string> nvml::name(nvml_device d) const {
  return read_text(api_->name, d.handle);
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
  return read_value<std::uint64_t, unsigned long long>(api_->energy, d.handle);
}
reading<nvml_memory> nvml::memory(nvml_device d) const {
  return read_value<nvml_memory, nvml_memory_raw>(api_->memory, d.handle);
}
reading<nvml_utilization> nvml::utilization(nvml_device d) const {
  return read_value<nvml_utilization, nvml_utilization_raw>(api_->utilization, d.handle);
}
reading<unsigned> nvml::pcie_tx_kbps(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_throughput, d.handle, kPcieTx);
}
reading<unsigned> nvml::pcie_rx_kbps(nvml_device d) const {
  return read_value<unsigned>(api_->pcie_throughput, d.handle, kPcieRx);
}
reading<std::uint64_t> nvml::clock_event_reasons(nvml_device d) const {
  return read_value<std::uint64_t, unsigned long long>(api_->clock_reasons, d.handle);
}

reading<std::uint64_t> nvml::ecc_uncorrected(nvml_device d, bool aggregate) const {
  return read_value<std::uint64_t, unsigned long long>(api_->ecc_total, d.handle, kEccUncorrected,
                                                       aggregate ? kEccAggregate : kEccVolatile);
}
reading<unsigned> nvml::retired_pages(nvml_device d) const {
  return read_with<unsigned, unsigned>(
      api_->retired_pages,
      [&](auto f, unsigned& total) {
        for (const unsigned cause : kRetiredCauses) {
          // A count of 0 asks for the number only: success means none, "insufficient size" some.
          unsigned count = 0;
          const nvml_return rc = f(d.handle, cause, &count, nullptr);
          if (rc != kSuccess && rc != kInsufficientSize) return rc;
          total += count;
        }
        return kSuccess;
      },
      [](unsigned total) { return total; });
}
reading<bool> nvml::retired_pages_pending(nvml_device d) const {
  return read_with<bool, unsigned>(
      api_->retired_pending, [&](auto f, unsigned& state) { return f(d.handle, &state); },
      [](unsigned state) { return state == kFeatureEnabled; });
}
reading<nvml_remapped_rows> nvml::remapped_rows(nvml_device d) const {
  return read_with<nvml_remapped_rows, std::array<unsigned, 4>>(
      api_->remapped_rows,
      [&](auto f, std::array<unsigned, 4>& v) { return f(d.handle, &v[0], &v[1], &v[2], &v[3]); },
      [](const std::array<unsigned, 4>& v) {
        return nvml_remapped_rows{v[0], v[1], v[2] != 0, v[3] != 0};
      });
}

reading<std::vector<nvml_process>> nvml::compute_processes(nvml_device d) const {
  return read_with<std::vector<nvml_process>, std::vector<nvml_process_raw>>(
      api_->processes,
      [&](auto f, std::vector<nvml_process_raw>& v) {
        // A count of 0 asks for the number; processes may start between the two calls, so the
        // buffer has room for more and the call is repeated while it is too small.
        unsigned count = 0;
        nvml_return rc = f(d.handle, &count, nullptr);
        for (int tries = 0; rc == kInsufficientSize && tries < 4; ++tries) {
          v.resize(count + 8);
          count = static_cast<unsigned>(v.size());
          rc = f(d.handle, &count, v.data());
        }
        v.resize(rc == kSuccess ? count : 0);
        return rc;
      },
      [](const std::vector<nvml_process_raw>& v) {
        std::vector<nvml_process> out;
        for (const nvml_process_raw& p : v)
          out.push_back({p.pid, p.used == kValueNotAvailable
                                    ? std::nullopt
                                    : std::optional<std::uint64_t>(p.used)});
        return out;
      });
}

}  // namespace gpu_basics

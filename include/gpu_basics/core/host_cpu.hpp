// How busy the host's CPUs were while a lesson ran, from the kernel's counters (/proc/stat) and
// this process's own CPU time: host-bound figures (pageable copies, host memcpy) slow down when
// another tenant of a VM or another job takes the CPUs, and a result that records it lets
// `compare` tell a noisy neighbour from a slower node. Host-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

/// The aggregate "cpu" line of /proc/stat, in clock ticks summed over every CPU.
struct cpu_ticks {
  std::uint64_t total = 0;  // user + nice + system + idle + iowait + irq + softirq + steal
  std::uint64_t idle = 0;   // idle + iowait
  std::uint64_t steal = 0;  // taken by the hypervisor for other guests

  bool operator==(const cpu_ticks&) const = default;
};

/// The "cpu " line of a /proc/stat text; nullopt when there is none or it is malformed.
[[nodiscard]] std::optional<cpu_ticks> parse_proc_stat(std::string_view text);

/// Shares of all the host's CPU time over an interval (each in [0, 1]).
struct host_cpu_load {
  unsigned cpus = 0;
  double steal = 0;               // stolen by the hypervisor
  double busy = 0;                // spent working (user, system, interrupts), by anyone
  double self = 0;                // of it, this process
  double others = 0;              // busy - self: other processes on the host
  std::optional<double> load_1m;  // /proc/loadavg at the end

  bool operator==(const host_cpu_load&) const = default;
};

/// {"cpus", "steal", "busy", "self", "others", "load_1m" (null when unknown)}; reading keeps a
/// missing key's default and throws json_path_error on a value of the wrong type.
GPU_BASICS_JSON(host_cpu_load, cpus, steal, busy, self, others, load_1m)

/// The load between two readings; `self_s` is this process's CPU seconds in between and
/// `ticks_per_s` the kernel's clock tick rate. Shares are 0 when no tick passed.
[[nodiscard]] host_cpu_load load_between(const cpu_ticks& a, const cpu_ticks& b, double self_s,
                                         double ticks_per_s, unsigned cpus);

/// Reads the host's counters at construction; load() gives the load since then. Where
/// /proc/stat cannot be read (not Linux, a sandbox), load() is nullopt.
class host_cpu_meter {
 public:
  host_cpu_meter();
  [[nodiscard]] std::optional<host_cpu_load> load() const;

 private:
  std::optional<cpu_ticks> start_;
  double self_s_ = 0;
};

}  // namespace gpu_basics

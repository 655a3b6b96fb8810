// A good citizen on a shared GPU: who else holds a compute context on the device, and how much
// of its free memory a large step of a lesson may take beside them. Host-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/nvml.hpp"

namespace gpu_basics {

/// The other processes on the device, as NVML lists them.
struct gpu_neighbours {
  bool known = false;  // false: NVML could not list them (`why` says why); taken as none
  std::string why;
  std::vector<unsigned> pids;    // NVML's PIDs, this process's left out
  std::uint64_t used_bytes = 0;  // their memory, where the driver says
  [[nodiscard]] bool any() const noexcept { return !pids.empty(); }
};

/// The others among `listed`: this process is the entry of `self_pid`, or, where no entry has it
/// (NVML reports PIDs of another PID namespace, as in a container), one entry, since this
/// process holds a context on the device when it asks.
[[nodiscard]] gpu_neighbours neighbours_of(const std::vector<nvml_process>& listed,
                                           unsigned self_pid);

/// What a large step does.
struct memory_step {
  std::string step;                // "the oversubscription ballast"
  std::string action = "ran";      // "ran", "shrank" or "skipped"
  std::uint64_t wanted_bytes = 0;  // what the configuration asks for
  std::uint64_t used_bytes = 0;    // what it took (0 when skipped)
  std::string line;                // the sentence for the log and the notes ("" when it ran)
  bool operator==(const memory_step&) const = default;
};
GPU_BASICS_JSON(memory_step, step, action, wanted_bytes, used_bytes, line)

/// The decision for a step that wants `wanted` bytes of the device's `free` bytes: alone on the
/// GPU (or with shared_gpu.force), it runs as asked. Beside other processes it may take at most
/// shared_gpu.free_share of `free` (rounded down to whole MiB): it shrinks to that when it can
/// (`shrinkable` and at least `min_bytes`), else it is skipped; the line says which, names the
/// other processes and the key that forces the step.
[[nodiscard]] memory_step plan_memory_step(std::string step, std::uint64_t wanted,
                                           std::uint64_t free, const gpu_neighbours& others,
                                           const config::shared_gpu_section& c, bool shrinkable,
                                           std::uint64_t min_bytes = 0);

}  // namespace gpu_basics

// Opening the GPU for a run of lessons: NVML (optional), every visible device, the selected one
// made current. The CLI calls this so that it makes no CUDA call itself.
#pragma once

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

/// A context for `cfg`: NVML loaded where it can be (else nvml_status says why), the devices
/// queried, cfg.device made current.
/// @throws no_device_error when there is no driver, no GPU, or no GPU cfg.device.
/// @throws cuda_error when the device cannot be made current.
[[nodiscard]] context open_context(const config& cfg);

/// Clears a sticky-free CUDA error left by a failed lesson so that the next one starts clean.
void clear_device_error() noexcept;

}  // namespace gpu_basics::lessons

// Logging setup: spdlog to stderr at the configured level, so stdout carries only results.
#pragma once

#include "gpu_basics/core/config.hpp"

namespace gpu_basics {

/// Sets the default logger's level (and a compact "[level] message" pattern on stderr).
void setup_logging(log_level level);

}  // namespace gpu_basics

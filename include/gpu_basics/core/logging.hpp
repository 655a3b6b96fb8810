// Logging setup: spdlog to stderr at the configured level, so stdout carries only results.
#pragma once

#include "gpu_basics/core/config.hpp"

namespace gpu_basics {

/// Sets the default logger's level (and a compact "[level] message" pattern on stderr). Every
/// log line flushes stdout first (flush_stdout()): see Note [stdout before stderr].
void setup_logging(log_level level);

/// Note [stdout before stderr]: results go to stdout, log and progress lines to stderr. Where both
/// are captured into one file (Slurm, CI, `> log 2>&1`), stdout is block-buffered and stderr is
/// not, so a line written to stderr lands before, or in the middle of, table rows printed earlier.
/// Flushing stdout (std::cout and C's stdout) before each such line keeps the order in which
/// they were written, whatever the buffering.
void flush_stdout() noexcept;

}  // namespace gpu_basics

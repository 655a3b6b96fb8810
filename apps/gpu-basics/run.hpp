#pragma once

#include <iosfwd>

#include "cli.hpp"

namespace gpu_basics::cli {

/// Loads the configuration, runs the command, prints and writes its results. Returns the exit
/// code (exit_codes.hpp); never throws.
int run(const options& o, std::ostream& out, std::ostream& err);

}  // namespace gpu_basics::cli

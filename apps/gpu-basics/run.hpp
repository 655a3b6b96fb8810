#pragma once

#include <iosfwd>
#include <vector>

#include "cli.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/record.hpp"

namespace gpu_basics::cli {

/// Loads the configuration, runs the command, prints and writes its results. Returns the exit
/// code (exit_codes.hpp); never throws.
int run(const options& o, std::ostream& out, std::ostream& err);

/// The tables of each lesson, as the live run and `show` print them.
void print(const lessons::run_record& rec, const std::vector<presentation::report>& reports,
           std::ostream& out);
/// --json, --csv and --html of a run.
/// @throws io_error when a file cannot be written.
void write_outputs(const options& o, const lessons::run_record& rec,
                   const std::vector<presentation::report>& reports, std::ostream& out);

}  // namespace gpu_basics::cli

#pragma once

#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "gpu_basics/core/config.hpp"
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

/// Writes "gpu-basics: <message>" as one line: escaped and cut by message_line(), as every error
/// line the CLI writes (a results file's strings and file names reach it).
void say(std::ostream& err, const std::string& message);

/// Flushes `out` (stdout, for the CLI) and checks that what was written to it got there.
/// @throws io_error when it did not (a full disk, a closed pipe), so that lost output is not
/// exit 0.
void check_written(std::ostream& out);

/// The exit code and the one-line message for an error escaping a command.
[[nodiscard]] std::pair<int, std::string> classify(const std::exception& e);

/// Measures the lessons of o.command on the GPU with `cfg` (checked, outputs writable), prints
/// them live and writes the outputs; `baseline` (check --baseline) joins a check. Returns the
/// exit code. In a host-only build: exit_no_gpu, saying that this build cannot measure.
/// @throws what the lessons throw (run() classifies it).
int measure_lessons(const options& o, config cfg,
                    const std::optional<lessons::run_record>& baseline, std::ostream& out,
                    std::ostream& err);

/// `gpu-basics ledger-probe DEVICE PCI_BUS_ID` (not listed in --help): the unified lesson's
/// ledger runs it as a fresh child process. Prints the probe's steps as one JSON line on `out`.
/// Returns the exit code; never throws. In a host-only build: exit_no_gpu.
int run_ledger_probe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace gpu_basics::cli

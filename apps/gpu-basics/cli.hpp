// Command-line parsing of gpu-basics, separate from running so it is unit-tested.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace gpu_basics::cli {

struct options {
  std::string command;  // info | memory | transfer | profile | all
  std::string config_path;  // empty: the built-in default
  std::vector<std::string> overrides;  // --set key=value, in order
  std::optional<std::string> log_level;
  std::optional<std::string> json_path;  // "-" = stdout
  std::optional<std::string> csv_path;
  std::optional<std::string> trace_path;  // memory, transfer, profile
};

struct parse_result {
  std::optional<options> opts;  // set when the command should run
  int exit_code = 0;            // otherwise: 0 after --help, 2 after an error
};

/// Parses argv; help and errors are written to `out` / `err`.
[[nodiscard]] parse_result parse(const std::vector<std::string>& args, std::ostream& out,
                                 std::ostream& err);

/// The subcommands, in the order `all` runs them.
[[nodiscard]] const std::vector<std::string>& commands();

}  // namespace gpu_basics::cli

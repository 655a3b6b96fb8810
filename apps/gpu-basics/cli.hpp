// Command-line parsing of gpu-basics, separate from running so it is unit-tested.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace gpu_basics::cli {

struct options {
  std::string command;  // a lesson's name, "all", "show", "report", "compare", "replay", "advise"
                        // or "preflight"
  std::string config_path;             // empty: the built-in default
  std::vector<std::string> overrides;  // --set key=value, in order
  std::optional<std::string> log_level;
  std::optional<std::string> json_path;  // "-" = stdout
  std::optional<std::string> csv_path;
  std::optional<std::string> trace_path;  // lessons that trace
  std::optional<std::string> html_path;   // --html (lessons, all), -o (report)
  std::string input_path;                 // show: the results file; replay: the snapshot
  std::vector<std::string> input_paths;   // report, compare: the results files, in order
  // check and compare (verdicts.cpp)
  bool strict = false;                       // check: WARN fails too
  std::optional<std::string> baseline_path;  // check --baseline
  std::optional<std::string> from_path;      // check --from: judge a saved run, no GPU
  bool force = false;                        // compare other GPU models / driver majors
  double threshold = 0.02;                   // compare: "same" within this relative change
  bool fleet = false;                        // compare --fleet
  std::vector<std::string> policies;         // replay, advise --policy CONF, in order
  std::vector<std::string> fit_sizes;        // advise --fit SIZE (parse_byte_size), in order
  std::optional<std::string> device_memory;  // replay, advise --device-memory SIZE
  std::optional<std::string> device_result;  // replay, advise --device RESULT.json (info, all)
  std::optional<std::string> torch_python;   // advise --torch-python PY: PyTorch reads the line
  std::optional<std::string> snapshot_path;  // memory --snapshot: a PyTorch memory snapshot
  // preflight (preflight.cpp): the recordings are input_paths
  std::string batches;                  // --batches 2,4,8: one per recording, increasing
  std::vector<std::string> at_batches;  // --at B, in order
};

struct parse_result {
  std::optional<options> opts;  // set when the command should run
  int exit_code = 0;            // otherwise: 0 after --help, 2 after an error
};

/// Parses argv; help and errors are written to `out` / `err`.
[[nodiscard]] parse_result parse(const std::vector<std::string>& args, std::ostream& out,
                                 std::ostream& err);

/// The subcommands: every lesson (registry order), then "all", "show", "report", "compare" and
/// "replay".
[[nodiscard]] const std::vector<std::string>& commands();

}  // namespace gpu_basics::cli

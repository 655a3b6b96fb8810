// The files gpu-basics writes with --json, as `show` and `report` read them: a lesson's (or all's)
// results, a saved advice (`advise --json`) and a saved replay (`replay --json`), one family told
// apart by their "command". No GPU.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace gpu_basics::cli {

/// What a saved file holds.
enum class saved_kind { results, advice, replay };  // saved.cpp names them in this order

/// A saved file, read and parsed once.
struct saved_file {
  std::string path;
  saved_kind kind = saved_kind::results;
  nlohmann::json json;
};

/// "an advice file (advise --json)", "a replay file (replay --json)", "a results file".
[[nodiscard]] std::string describe(saved_kind kind);

/// `j` as advise and replay write it: indented, bytes that are not UTF-8 (a snapshot's strings
/// may hold any) as U+FFFD, and a final newline.
[[nodiscard]] std::string saved_json_text(const nlohmann::json& j);

/// The file at `path` parsed as a results file is (parse_results_json()): at most
/// kMaxResultsFileBytes, and at most kMaxSnapshotJsonBytes for an advice or replay file (each
/// raised by GPU_BASICS_MAX_INPUT_MIB).
/// @throws format_error for a file that cannot be opened, is too large or is not JSON; io_error
/// when reading fails midway; interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] saved_file read_saved_file(const std::string& path);

/// `show` of an advice or replay file: the tables advise or replay printed (or, with --json -,
/// the file as they write it), then --json FILE and --csv. Returns the exit code.
/// @throws format_error when the file cannot be read as its kind; io_error when an output cannot
/// be written.
int show_saved_snapshot_file(const options& o, const saved_file& f, std::ostream& out);

/// `report` of an advice or replay file: its page, written to -o. Returns the exit code.
/// @throws as show_saved_snapshot_file().
int report_saved_snapshot_file(const options& o, const saved_file& f, std::ostream& out);

}  // namespace gpu_basics::cli

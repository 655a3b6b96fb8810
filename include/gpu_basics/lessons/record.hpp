// A saved run: what `--json` writes and `show`, `report`, `compare` and `check` read. Each lesson's
// typed result is kept whole (schema 2), beside the rendered tables for readers that want tables
// only. Files of schema 1 (tables and notes, no results) are upgraded on reading, so baselines
// kept from earlier versions still load. Host-only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

/// The schema this build writes. 1: tables only; 2: lesson results (lossless) plus tables.
inline constexpr int kSchemaVersion = 2;

/// One run of one lesson or of `all`.
struct run_record {
  int schema_version = kSchemaVersion;  // as read; always kSchemaVersion when written
  std::string command;                  // "info", "memory", ... or "all"
  nlohmann::json environment;           // see core/environment.hpp
  std::vector<std::pair<std::string, nlohmann::json>> results;  // lesson -> result, run order
  std::vector<std::pair<std::string, std::string>> errors;      // lesson -> why it failed
  std::string source;  // the file it was read from, for messages; empty for a live run
};

/// Renders every result of the record (explain + present), in run order.
/// @throws format_error when a result cannot be read.
[[nodiscard]] std::vector<presentation::report> render(const run_record& r);

/// The measured device's facts, from the record's environment (the GPU its config selected).
/// @throws format_error when the environment names no such GPU.
[[nodiscard]] device_facts facts_of(const run_record& r);

/// The file's JSON: schema_version, command, environment, results, errors, and `rendered`'s
/// tables (ids prefixed "<lesson>." for `all`).
[[nodiscard]] nlohmann::json to_json(const run_record& r,
                                     const std::vector<presentation::report>& rendered);

/// Reads a record of schema 1 or 2 (its parts are moved out of `j`: pass a temporary to spare a
/// copy). `source` names the input in messages.
/// @throws format_error naming what is wrong (not gpu-basics output, unknown schema or lesson).
[[nodiscard]] run_record parse_record(nlohmann::json j, const std::string& source);

/// The deepest nesting of arrays and objects a results file may have (the files gpu-basics
/// writes nest 10 levels at most): deeper input is refused while it is parsed, long before any
/// recursion over it could exhaust the stack.
inline constexpr int kMaxResultsDepth = 64;

/// The longest string (value or key) a results file may hold, in bytes.
inline constexpr std::size_t kMaxResultsString = 64 * 1024;

/// Parses a results file's text: JSON nested at most kMaxResultsDepth levels, strings of at most
/// kMaxResultsString bytes, numbers within double range. `source` names the input in messages.
/// @throws format_error naming the source, the line and column and the key path
/// (`results.transfer.measurements[3].seconds`) of the first problem.
[[nodiscard]] nlohmann::json parse_results_json(const std::string& text, const std::string& source);

/// Reads and parses a results file.
/// @throws io_error when it cannot be read; format_error when it is not a results file.
[[nodiscard]] run_record load_record(const std::string& path);

}  // namespace gpu_basics::lessons

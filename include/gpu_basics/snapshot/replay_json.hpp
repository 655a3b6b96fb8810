// A saved replay (`gpu-basics replay --json`) read back, so that `show` prints its table and
// `report` draws it as they do for the run it came from; and the schema version that the files of
// replay carries. The reader is as strict as advice_from_json(): every key the writer
// writes must be there, each value of its kind, and the figures must hold together. Host-only.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics {

/// The schema of the replay file this build writes (to_json(const replay_report&)).
inline constexpr int kReplaySchemaVersion = 1;

/// The "schema_version" of a saved replay `j`, checked to be one this build reads: 1 to
/// `current`.
/// @throws json_path_error when it is missing or not an integer; format_error "schema_version N
/// is not one this build reads (1 to C)", adding "; a newer gpu-basics wrote it" above `current`.
int saved_schema_version(const nlohmann::json& j, int current);

/// Refuses a size in bytes (the value of a key "bytes" or "..._bytes", or of any element of a
/// list under one) above 2^63 - 1: no device holds that much, and tables show sizes as signed
/// 64-bit integers (where 2^64 - 1 once printed as "-0").
/// @throws json_path_error naming its key path.
void check_saved_byte_sizes(const nlohmann::json& j);

/// The replay `j` holds (a "command": "replay" object that to_json() wrote). A file without a
/// schema_version is refused: it comes from before garbage_collection_threshold was replayed as
/// PyTorch runs it, and its figures for it mean something else. The table and the
/// derived keys ("best_conf", "events_per_s", "table") are not read: replay_table() and
/// replay_report's methods make them again from the figures.
/// @throws format_error "<source>: ..." naming the key path of the first value that is missing,
/// of the wrong kind or out of range ("policies[3].peak_reserved_bytes: expected an integer ..."),
/// or figures that contradict one another.
[[nodiscard]] replay_report replay_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace gpu_basics

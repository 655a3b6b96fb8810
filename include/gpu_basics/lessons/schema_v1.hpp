// Reading schema-1 results files (tables and notes only) back into lesson results: the helpers
// every lesson's upgrade shares. Host-only.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu_basics/lessons/trace_output.hpp"

namespace gpu_basics::lessons::schema_v1 {

/// Bytes from format_bytes' text ("512 B", "1 MiB", "1.0 MiB", "1.5 GiB"), rounded to a byte.
/// @throws format_error when the text is not such a size or does not fit 64 bits.
[[nodiscard]] std::uint64_t bytes_from_text(const std::string& text);

/// The trace summary from a schema-1 "trace" table (its rows and notes) and, where the lesson
/// kept one, its extra.trace block (path, source, write time, events), which wins.
/// @throws nlohmann::json::exception or format_error on a malformed table.
[[nodiscard]] trace_summary trace_from_v1(const nlohmann::json& table,
                                          const nlohmann::json* extra_trace);

}  // namespace gpu_basics::lessons::schema_v1

// Reading schema-1 results files (tables and notes only) back into lesson results: what every
// lesson's upgrade shares (the rest is private to the lessons module, src/lessons/v1/). Host-only.
#pragma once

#include <cstdint>
#include <string>

namespace gpu_basics::lessons::schema_v1 {

/// Bytes from format_bytes' text ("512 B", "1 MiB", "1.0 MiB", "1.5 GiB"), rounded to a byte.
/// @throws format_error when the text is not such a size or does not fit 64 bits.
[[nodiscard]] std::uint64_t bytes_from_text(const std::string& text);

}  // namespace gpu_basics::lessons::schema_v1

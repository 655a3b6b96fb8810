// Helpers every schema-1 reader (src/lessons/v1/*_v1.cpp) shares: tables, extras, notes and
// numbers of a schema-1 lesson block. Private to the lessons module; host-only.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/schema_v1.hpp"

namespace gpu_basics::lessons::v1 {

using json = nlohmann::json;

/// A number read whole from `text` (digits as a reader's regex matched them).
/// @throws format_error when it does not fit `T`.
template <class T>
T number_of(const std::string& text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw format_error("'" + text + "' is not a number in range");
  return v;
}

/// Bytes from format_bytes' text ("512 B", "1 MiB", "1.0 MiB", "1.5 GiB"), rounded to a byte; a
/// JSON integer is taken as bytes.
/// @throws format_error or nlohmann::json::exception when the cell is neither.
[[nodiscard]] std::uint64_t bytes_of(const json& cell);

/// The table `id` of the block's "tables", nullptr when the block has none.
/// @throws nlohmann::json::exception when the block has no "tables".
[[nodiscard]] const json* table_of(const json& block, const char* id);

/// extra[key] of the block, nullptr when there is no extra object, no such key or it is null.
[[nodiscard]] const json* extra_entry(const json& block, const char* key);

/// The block's "extra" (a copy), or an empty object when it has none.
[[nodiscard]] json extra_of(const json& block);

/// &object[key], or nullptr when the object has no such key.
[[nodiscard]] const json* member_of(const json& object, const char* key);

/// A table's title, or "" when it has none.
[[nodiscard]] std::string title_of(const json& t);

/// A table's notes that are text, in order.
[[nodiscard]] std::vector<std::string> notes_of(const json& t);

/// row[key] as a number, nullopt when it is null.
/// @throws nlohmann::json::exception when the row has no such column.
[[nodiscard]] std::optional<double> nullable_number(const json& row, const char* key);

/// row[key] as a number, nullopt when the row has no such column or it is null.
[[nodiscard]] std::optional<double> number_if_any(const json& row, const char* key);

}  // namespace gpu_basics::lessons::v1

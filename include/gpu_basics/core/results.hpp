// One results model for every lesson: tables of typed values, rendered for people (aligned text
// tables) and for machines (JSON with numbers as numbers and null for "no value", CSV).
// Host-only.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpu_basics {

/// A cell: nothing (JSON null), a flag, an integer, a real, or text.
using value = std::variant<std::monostate, bool, std::int64_t, double, std::string>;

/// A column stores values in base units (key names the unit: "bandwidth_bytes_per_s"); the text
/// table shows value × display_scale with `precision` decimals under `header` ("GB/s").
struct column {
  std::string key;
  std::string header;
  double display_scale = 1.0;
  int precision = 2;
};

struct table {
  std::string id;     // stable, machine-friendly: "h2d_pinned"
  std::string title;  // for people
  std::vector<column> columns;
  std::vector<std::vector<value>> rows;
  std::vector<std::string> notes;  // explanations printed under the table

  /// Appends a row; throws logic_error if its width differs from the columns'.
  void add_row(std::vector<value> row);
};

/// What one lesson (or `info`) produced.
struct report {
  std::string command;          // "info", "memory", ...
  nlohmann::json environment;   // see environment.hpp
  std::vector<table> tables;
  nlohmann::json extra = nlohmann::json::object();  // lesson-specific structured data
};

/// Aligned text table: title, header, rows, then notes.
[[nodiscard]] std::string render_text(const table& t);
[[nodiscard]] std::string render_cell(const value& v, const column& c);

/// {"id", "title", "columns": [...keys], "rows": [{key: value, ...}], "notes": [...]}
[[nodiscard]] nlohmann::json to_json(const table& t);
[[nodiscard]] nlohmann::json to_json(const report& r);
[[nodiscard]] nlohmann::json to_json(const value& v);

/// RFC 4180 CSV: a header of column keys, then rows with base-unit values (empty = no value).
[[nodiscard]] std::string render_csv(const table& t);

/// Writes text to `path` through a temporary file renamed into place, so a failure never leaves
/// a half-written file. Creates missing parent directories. Throws io_error.
void write_file_atomically(const std::string& path, const std::string& contents);

/// Writes the report's JSON (indented) to path.
void write_json(const report& r, const std::string& path);

/// CSV of every table: one table → `path`; several → `<stem>.<table id>.csv` beside it.
/// Returns the paths written.
std::vector<std::string> write_csv(const report& r, const std::string& path);

}  // namespace gpu_basics

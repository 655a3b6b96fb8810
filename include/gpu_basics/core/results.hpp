// Presentation: what a lesson's present() step produces from its result. Tables of typed cells,
// rendered for people (aligned text tables) and for machines (JSON with numbers as numbers and
// null for "no value", CSV). A lesson's lossless result lives in its own struct
// (gpu_basics/lessons/); these types only show it. Host-only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpu_basics {

/// Writes text to `path` through a temporary file renamed into place, so a failure never leaves
/// a half-written file. Creates missing parent directories. A path that is not a regular file or
/// a new one (a device, a FIFO, /dev/stdout, anything under /dev or /proc) is written in place
/// instead: renaming over it would replace it.
/// @throws io_error when the directory or the file cannot be written; interrupted when a signal
/// stops a write that blocks (a FIFO with no reader).
/// A path that is a symbolic link is replaced by a regular file; the link's target is untouched.
void write_file_atomically(const std::string& path, const std::string& contents);

/// Writes several files as one: every temporary is written first, and only when all are written
/// are they renamed into place, so a file that cannot be written leaves none of the others new.
/// Special files (writes_in_place) are written in place after the temporaries and before the
/// renames: one that fails (/dev/full) leaves no file replaced.
/// @throws io_error as write_file_atomically(); interrupted when a signal arrived before the
/// renames (nothing is renamed then).
void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files);

/// Whether two paths name the same file: for existing ones the same device and inode (through
/// links), for new ones the same canonical parent directory and name.
[[nodiscard]] bool same_file(const std::string& a, const std::string& b);

/// Whether write_file_atomically() writes `path` in place (a special file) rather than by rename.
[[nodiscard]] bool writes_in_place(const std::string& path);

/// Checks, writing nothing, that a file can be written at `path`: it names a file (not a
/// directory), and either it is a special file open for writing, or the nearest directory above it
/// that exists can take new files (missing ones below it are made when writing).
/// @throws io_error naming the path and why it cannot be written.
void check_writable(const std::string& path);

/// Checks, writing nothing, that files can be created in the directory `path` (or in the missing
/// directories below its nearest existing parent, once made).
/// @throws io_error naming the directory and why not.
void check_writable_directory(const std::string& path);

namespace presentation {

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

  /// Appends a row.
  /// @throws logic_error when its width differs from the columns'.
  void add_row(std::vector<value> row);
};

/// What one lesson shows: its tables, each with the notes that explain it.
struct report {
  std::string lesson;  // "info", "memory", ...
  std::vector<table> tables;
};

/// Aligned text table: title, header, rows, then notes.
[[nodiscard]] std::string render_text(const table& t);
/// One cell as text: n/a for no value or a non-finite real, yes/no, value x scale with the
/// column's decimals.
[[nodiscard]] std::string render_cell(const value& v, const column& c);

/// {"id", "title", "columns": [...keys], "rows": [{key: value, ...}], "notes": [...]}
[[nodiscard]] nlohmann::json to_json(const table& t);
/// A cell as JSON: null for no value or a non-finite real.
[[nodiscard]] nlohmann::json to_json(const value& v);

/// RFC 4180 CSV: a header of column keys, then rows with base-unit values (empty = no value).
[[nodiscard]] std::string render_csv(const table& t);

/// CSV of every table: one table → `path`; several → `<stem>.<table id>.csv` beside it.
/// Returns the paths written. All of them or none are replaced (write_files_atomically).
/// @throws io_error when a file cannot be written.
std::vector<std::string> write_csv(const std::vector<table>& tables, const std::string& path);

}  // namespace presentation
}  // namespace gpu_basics

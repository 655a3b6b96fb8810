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
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/schema_v1.hpp"
#include "gpu_basics/lessons/trace_output.hpp"

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

/// A value of a schema-1 block with its key path ("tables.bandwidth.rows[3]"), so that every
/// error says where it is: what cannot be read throws a json_path_error at that path. Mirrors
/// the part of nlohmann::json the readers use. A node refers to its value, which must outlive it.
class node {
 public:
  /// `value` at `path` ("" for the top of the block).
  explicit node(const json& value, std::string path = {})
      : value_(&value), path_(std::move(path)) {}

  /// The value itself.
  [[nodiscard]] const json& raw() const noexcept { return *value_; }
  /// Its key path.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  [[nodiscard]] bool is_null() const noexcept { return value_->is_null(); }
  [[nodiscard]] bool is_object() const noexcept { return value_->is_object(); }
  [[nodiscard]] bool is_array() const noexcept { return value_->is_array(); }
  [[nodiscard]] bool is_string() const noexcept { return value_->is_string(); }
  [[nodiscard]] bool is_number() const noexcept { return value_->is_number(); }
  /// Elements of a list, members of an object (1 for any other value, as nlohmann counts).
  [[nodiscard]] std::size_t size() const noexcept { return value_->size(); }
  [[nodiscard]] bool empty() const noexcept { return value_->empty(); }

  /// Whether it is an object with `key`.
  [[nodiscard]] bool contains(const std::string& key) const {
    return value_->is_object() && value_->contains(key);
  }
  /// Its member `key`, or nothing when it is not an object or has no such key.
  [[nodiscard]] std::optional<node> find(const std::string& key) const;
  /// Its member `key`.
  /// @throws json_path_error when it is not an object or has no such key.
  [[nodiscard]] node at(const std::string& key) const;
  /// Element `i` of a list.
  /// @throws json_path_error when it is not a list or is shorter.
  [[nodiscard]] node at(std::size_t i) const;
  /// The value as a T (read_json).
  /// @throws json_path_error naming the path of what cannot be read.
  template <class T>
  [[nodiscard]] T get() const {
    T v{};
    try {
      read_json(*value_, v);
    } catch (json_path_error& e) {
      e.prepend_path(path_);
      throw;
    }
    return v;
  }
  /// Member `key` as a T, or `fallback` when it is not an object or has no such key.
  /// @throws json_path_error when the member is not a T.
  template <class T>
  [[nodiscard]] T value(const std::string& key, T fallback) const {
    const auto m = find(key);
    return m ? m->get<T>() : fallback;
  }
  /// A json_path_error at this node's path saying `detail`.
  [[nodiscard]] json_path_error error(const std::string& detail) const;

  /// Its members, in key order.
  /// @throws json_path_error when it is not an object.
  [[nodiscard]] std::vector<std::pair<std::string, node>> items() const;

  /// The elements of a list, each a node at "path[i]".
  class iterator {
   public:
    iterator(const node* list, std::size_t i) : list_(list), i_(i) {}
    node operator*() const;
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const node* list_;
    std::size_t i_;
  };
  /// @throws json_path_error when it is not a list.
  [[nodiscard]] iterator begin() const;
  [[nodiscard]] iterator end() const { return {this, value_->is_array() ? value_->size() : 0}; }

 private:
  const json* value_;
  std::string path_;
};

/// Bytes from format_bytes' text ("512 B", "1 MiB", "1.0 MiB", "1.5 GiB"), rounded to a byte; a
/// JSON integer is taken as bytes.
/// @throws json_path_error when the cell is neither.
[[nodiscard]] std::uint64_t bytes_of(const node& cell);

/// Bytes from format_bytes' text found in `where` (a table's title): bytes_of with the error at
/// `where`'s path.
/// @throws json_path_error when the text is no such size.
[[nodiscard]] std::uint64_t bytes_in(const node& where, const std::string& text);

/// A number read whole from `text`, found in `where` (digits as a reader's regex matched them).
/// @throws json_path_error at `where`'s path when it does not fit `T`.
template <class T>
T number_in(const node& where, const std::string& text) {
  try {
    return number_of<T>(text);
  } catch (const format_error& e) {
    throw where.error(e.what());
  }
}

/// The table `id` of the block's "tables", nothing when the block has none.
/// @throws json_path_error when the block has no "tables" object.
[[nodiscard]] std::optional<node> table_of(const node& block, const char* id);

/// extra[key] of the block, nothing when there is no extra object, no such key or it is null.
[[nodiscard]] std::optional<node> extra_entry(const node& block, const char* key);

/// The block's "extra", or an empty object (at the same path) when it has none.
[[nodiscard]] node extra_of(const node& block);

/// A table's title, or "" when it has none.
/// @throws json_path_error when it is not text.
[[nodiscard]] std::string title_of(const node& t);

/// A table's notes that are text, in order.
[[nodiscard]] std::vector<std::string> notes_of(const node& t);

/// A table's "rows", a list.
/// @throws json_path_error when it has none or they are not a list.
[[nodiscard]] node rows_of(const node& t);

/// The trace summary from a schema-1 "trace" table (its rows and notes) and, where the lesson
/// kept one, its extra.trace block (path, source, write time, events), which wins.
/// @throws json_path_error on a malformed table.
[[nodiscard]] trace_summary trace_from_v1(const node& table,
                                          const std::optional<node>& extra_trace);

/// row[key] as a number, nullopt when it is null.
/// @throws json_path_error when the row has no such column or it is not a number.
[[nodiscard]] std::optional<double> nullable_number(const node& row, const char* key);

/// row[key] as a number, nullopt when the row has no such column or it is null.
/// @throws json_path_error when it is not a number.
[[nodiscard]] std::optional<double> number_if_any(const node& row, const char* key);

}  // namespace gpu_basics::lessons::v1

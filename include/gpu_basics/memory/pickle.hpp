// A small reader and writer of Python pickles, for PyTorch memory snapshots
// (torch.cuda.memory._dump_snapshot writes one; https://pytorch.org/memory_viz reads one). Only
// plain data: None, bool, int (64-bit), float, str, bytes, list, tuple and dict with str or int
// keys. Nothing that names a Python class or calls one (GLOBAL, REDUCE, BUILD, NEWOBJ, ...) is
// accepted, so a hostile file can do no more than fail with a message. Host-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace gpu_basics::pickle {

class value;
using items = std::vector<value>;
using entries = std::vector<std::pair<value, value>>;

/// One Python value. Strings and containers are held by shared pointers: copying a value shares
/// them (clone() copies the containers). A value read by read() has no cycle, but a value the
/// pickle memoised appears wherever the pickle uses it again (GET, DUP), shared, not copied.
class value {
 public:
  enum class type : std::uint8_t { none, boolean, integer, real, str, bytes, list, tuple, dict };

  value() = default;  // None
  [[nodiscard]] static value boolean(bool b);
  [[nodiscard]] static value integer(std::int64_t i);
  [[nodiscard]] static value real(double d);
  [[nodiscard]] static value str(std::string s);
  [[nodiscard]] static value bytes(std::string b);
  [[nodiscard]] static value list(items v = {});
  [[nodiscard]] static value tuple(items v = {});
  [[nodiscard]] static value dict(entries v = {});

  [[nodiscard]] type kind() const noexcept;
  [[nodiscard]] bool is(type t) const noexcept { return kind() == t; }
  /// Python's name of the type ("NoneType", "bool", "int", "float", "str", "bytes", "list",
  /// "tuple", "dict"), for messages.
  [[nodiscard]] std::string_view type_name() const noexcept;

  /// The value; a logic_error when the type differs (as_real also takes an int).
  [[nodiscard]] bool as_bool() const;
  [[nodiscard]] std::int64_t as_int() const;
  [[nodiscard]] double as_real() const;
  [[nodiscard]] const std::string& as_str() const;  // str or bytes
  [[nodiscard]] const items& as_items() const;      // list or tuple
  [[nodiscard]] const entries& as_entries() const;  // dict

  /// The dict entry with this str key, or nullptr (also when this is not a dict).
  [[nodiscard]] const value* find(std::string_view key) const noexcept;
  /// The dict entry with this int key, or nullptr.
  [[nodiscard]] const value* find(std::int64_t key) const noexcept;

  /// Builders: appends to a list or tuple; sets a dict key (appended: keys are not checked for
  /// repeats). @throws logic_error on another type.
  void append(value v);
  void set(value key, value v);
  /// Shorthand for set(str(key), v).
  void set(std::string key, value v) { set(str(std::move(key)), std::move(v)); }

  /// A deep copy: no container shared with this one.
  [[nodiscard]] value clone() const;

  /// Values in this value as a tree: 1 for a scalar or a string, 1 + its elements' (keys
  /// included) for a container, a shared container counted at each place (saturates).
  [[nodiscard]] std::uint64_t tree_values() const noexcept;

  /// Equal types and contents (containers compared element by element).
  friend bool operator==(const value& a, const value& b);

  struct str_data {
    std::shared_ptr<const std::string> s;
  };
  struct bytes_data {
    std::shared_ptr<const std::string> s;
  };
  struct seq_node {
    items v;
    std::uint32_t height = 1;  // nesting levels, this one included
    bool tuple = false;
    bool sealed = false;       // read(): shared or inside another container, so never changed
    std::uint64_t values = 1;  // tree_values()
  };
  struct dict_node {
    entries v;
    std::uint32_t height = 1;
    bool sealed = false;
    std::uint64_t values = 1;
  };
  /// Nesting levels: 0 for a scalar, 1 for a container of scalars.
  [[nodiscard]] std::uint32_t height() const noexcept;

 private:
  friend class reader;
  using data = std::variant<std::monostate, bool, std::int64_t, double, str_data, bytes_data,
                            std::shared_ptr<seq_node>, std::shared_ptr<dict_node>>;
  data d_;
};

/// Limits of read(): past them the input is rejected with a message, never followed.
struct read_limits {
  std::uint32_t max_depth = 1000;  // nesting of containers
  /// The budget of the whole read: values made, each use of a memoised value counted as its
  /// tree_values() (as if it were copied), so what a reader of the result walks stays
  /// proportional to the input. 0: the larger of 50 million and 8 per byte of input (a real
  /// snapshot makes about 0.2 per byte; one whose frames share memoised dicts about 1.5).
  std::size_t max_values = 0;
};

/// The value a pickle of protocol 0-5 holds (the opcodes CPython's pickle writes for plain data:
/// PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP, EMPTY_DICT/LIST/TUPLE, DICT, LIST, TUPLE,
/// TUPLE1-3, APPEND(S), SETITEM(S), NONE, NEWTRUE/NEWFALSE, INT, BININT/BININT1/BININT2, LONG,
/// LONG1/LONG4, FLOAT, BINFLOAT, UNICODE, SHORT_BINUNICODE/BINUNICODE/BINUNICODE8, SHORT_BINBYTES/
/// BINBYTES/BINBYTES8, MEMOIZE, PUT/BINPUT/LONG_BINPUT, GET/BINGET/LONG_BINGET).
/// @throws format_error naming the problem and its byte offset: an opcode outside that set (by
/// name: "GLOBAL at offset 2"), a truncated stream, a length past the end, an int beyond 64 bits,
/// a dict key that is not str or int, nesting or a value count past `limits`, bytes after STOP.
[[nodiscard]] value read(std::string_view bytes, read_limits limits = {});

/// Checks the first bytes of a pickle, so that a file that is not one can be refused before the
/// rest is read: `head` is read as read() would, its end being no error.
/// @throws format_error as read() does for a problem within `head` (the same message).
void check_start(std::string_view head);

/// `v` as a pickle of protocol 2 (3 when it holds bytes), with only the opcodes PyTorch's
/// memory_viz reads (torch/utils/viz/MemoryViz.js has its own unpickler): PROTO, EMPTY_DICT,
/// EMPTY_LIST, EMPTY_TUPLE, MARK, SETITEMS, APPENDS, TUPLE, TUPLE1-3, BININT1, BININT2, BININT,
/// LONG1 (beyond 32 bits: addresses), BINUNICODE, BINPUT/LONG_BINPUT and BINGET/LONG_BINGET
/// (repeated short strings, as dict keys), BINFLOAT, NONE, NEWTRUE, NEWFALSE, STOP; bytes (never
/// in a snapshot) as BINBYTES. Lists and dicts go in batches of 1000, as CPython writes them
/// (memory_viz spreads each batch into a call's arguments).
/// @throws logic_error when `v` nests deeper than 1000.
void write(std::ostream& out, const value& v);
/// write() into a string.
[[nodiscard]] std::string dumps(const value& v);

}  // namespace gpu_basics::pickle

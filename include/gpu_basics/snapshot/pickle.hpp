// A small reader and writer of Python pickles, for PyTorch memory snapshots
// (torch.cuda.memory._dump_snapshot writes one; https://pytorch.org/memory_viz reads one). Only
// plain data: None, bool, int (64-bit), float, str, bytes, list, tuple and dict with str or int
// keys. Nothing that names a Python class or calls one (GLOBAL, REDUCE, BUILD, NEWOBJ, ...) is
// accepted, so a hostile file can do no more than fail with a message. A pickle of a GB (a
// snapshot of millions of trace entries) is read from a byte_source a chunk at a time, with what
// the caller does not need left out (read_options). Host-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
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
  [[nodiscard]] std::string_view type_name() const noexcept { return type_name(kind()); }
  [[nodiscard]] static std::string_view type_name(type t) noexcept;

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

  /// Equal types and contents (containers compared element by element; items an item_sink
  /// took are not compared).
  friend bool operator==(const value& a, const value& b);

  /// A list whose first items an item_sink took as read() added them (see read_options::sink):
  /// how many (they come before as_items(), which holds the rest), and the id the sink was
  /// given for the list. 0 for anything else.
  [[nodiscard]] std::size_t taken() const noexcept;
  [[nodiscard]] std::uint64_t list_id() const noexcept;

 private:
  // The representation; the nodes and what read() keeps in them are private to the reader
  // (src/snapshot/pickle_value.hpp).
  friend class reader;
  struct str_data {
    std::shared_ptr<const std::string> s;
  };
  struct bytes_data {
    std::shared_ptr<const std::string> s;
  };
  struct seq_node;
  struct dict_node;
  /// read(): a use of a value that is left out (under an opaque key), standing in for it on the
  /// stack; never in read()'s result.
  struct left_out_use {
    std::uint32_t height = 0;
    type kind = type::none;
  };
  /// Nesting levels (0 for a scalar, 1 for a container of scalars), and tree_values(): inline
  /// where the nodes are seen.
  [[nodiscard]] std::uint32_t height() const noexcept;
  [[nodiscard]] std::uint64_t tree_size() const noexcept;

  using data = std::variant<std::monostate, bool, std::int64_t, double, str_data, bytes_data,
                            std::shared_ptr<seq_node>, std::shared_ptr<dict_node>, left_out_use>;
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

/// Where read() takes its bytes from when they are not all in memory (a file read in chunks).
/// read() goes over them twice: once for the memo's uses, once to build the value.
class byte_source {
 public:
  virtual ~byte_source() = default;
  /// Up to `n` bytes into `out`: how many, 0 only at the end.
  /// @throws what the source throws (io_error, format_error, interrupted).
  virtual std::size_t read(char* out, std::size_t n) = 0;
  /// Starts again from the first byte.
  virtual void rewind() = 0;
  /// The number of bytes in all, when known: a length past it is refused without reading on.
  [[nodiscard]] virtual std::optional<std::uint64_t> size() const { return std::nullopt; }
};

/// One entry of a dict of str keys and scalar values, as read() offers such a dict to an
/// item_sink without making it a value (see item_sink); its views are valid during the call.
struct flat_entry {
  std::string_view key;
  value::type kind = value::type::none;  // none, boolean, integer, real or str
  std::int64_t integer = 0;              // boolean: 0 or 1
  double real = 0;
  std::string_view text;  // str

  /// As value's accessors: the type, and the scalar (as_int() of a boolean is a logic_error).
  [[nodiscard]] bool is(value::type t) const noexcept { return kind == t; }
  [[nodiscard]] std::string_view type_name() const noexcept { return value::type_name(kind); }
  [[nodiscard]] bool as_bool() const;
  [[nodiscard]] std::int64_t as_int() const;
  [[nodiscard]] std::string_view as_str() const;
};

/// Takes list items as read() appends them, so that a caller that turns each into something
/// smaller (a snapshot's trace entries) does not hold the whole list as values.
class item_sink {
 public:
  virtual ~item_sink() = default;
  /// `item` is being appended (APPEND, APPENDS) to the list `list_id` (an id of this read's),
  /// which holds no item yet. Returns true to take it: the list counts it (value::taken())
  /// instead of holding it; false leaves it in the list, and the list's later items are not
  /// offered. `item` never changes after this call.
  virtual bool take(std::uint64_t list_id, const value& item) = 0;
  /// The same for a dict of str keys and scalars (None standing for a container under an opaque
  /// key) that read() has not made a value: taking it or not must be as take() of the value
  /// would decide. read() may take back what it offered this way (untake()).
  virtual bool take(std::uint64_t list_id, std::span<const flat_entry> item) = 0;
  /// Forgets the last `n` items taken from `list_id` as flat dicts: read() reads them again.
  virtual void untake(std::uint64_t list_id, std::size_t n) = 0;
  /// Forgets every item taken: read() is starting over without the sink.
  virtual void clear() = 0;
  /// Before anything is offered: the most dicts the pickle can make (its EMPTY_DICT and DICT
  /// opcodes, which the first pass counts), for room to be reserved.
  virtual void expect(std::uint64_t dicts) { (void)dicts; }
};

/// How read() reads: limits, and what the caller does not need kept.
struct read_options {
  read_limits limits;
  /// Dict keys whose values the caller never looks at (a snapshot's "frames"): a container
  /// under one is not built (its items are read and checked, not kept) and None stands in
  /// the dict; a use of a memoised value there counts as one value, not its tree. Should such a
  /// value be needed elsewhere (a memoised one used under another key), read() starts over
  /// without this, as read(bytes, limits) reads.
  std::vector<std::string> opaque_keys;
  /// Takes list items as they are appended (see item_sink); a list whose taken items would
  /// have to be copied (one changed after being shared) makes read() start over without it.
  item_sink* sink = nullptr;
};

/// The value a pickle of protocol 0-5 holds (the opcodes CPython's pickle writes for plain data:
/// PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP, EMPTY_DICT/LIST/TUPLE, DICT, LIST, TUPLE,
/// TUPLE1-3, APPEND(S), SETITEM(S), NONE, NEWTRUE/NEWFALSE, INT, BININT/BININT1/BININT2, LONG,
/// LONG1/LONG4, FLOAT, BINFLOAT, UNICODE, SHORT_BINUNICODE/BINUNICODE/BINUNICODE8, SHORT_BINBYTES/
/// BINBYTES/BINBYTES8, MEMOIZE, PUT/BINPUT/LONG_BINPUT, GET/BINGET/LONG_BINGET). A memoised value
/// that is never used again is not kept (the bytes are looked over once for the memo's uses
/// first), nor one whose last use is past.
/// @throws format_error naming the problem and its byte offset: an opcode outside that set (by
/// name: "GLOBAL at offset 2"), a truncated stream, a length past the end, an int beyond 64 bits,
/// a dict key that is not str or int, nesting or a value count past `limits`, bytes after STOP.
[[nodiscard]] value read(std::string_view bytes, read_limits limits = {});
/// read() with options (opaque keys, an item sink).
[[nodiscard]] value read(std::string_view bytes, const read_options& options);
/// read() of the bytes `in` gives from its first byte (it is rewound first), a chunk at a time
/// (never all held at once).
/// @throws format_error as read(); what `in` throws.
[[nodiscard]] value read(byte_source& in, const read_options& options);

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

// The pickle opcodes, one table (Lib/pickletools.py documents them): for each its byte, CPython's
// name, its operand (none, a fixed number of bytes, a little-endian length of 1, 4 or 8 bytes and
// that many bytes, or text up to a newline) and its family. The reader's three passes (the first
// pass that counts the memo's uses, the batches read straight from the bytes, and step()) take
// operand widths from here, so an opcode is added by one entry here and its action in step().
// An opcode that is not here, or is here as `refused`, is refused by name. Private to the snapshot
// module (and its tests).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpu_basics::pickle::ops {

/// The opcodes by name (their bytes).
enum code : unsigned char {
  // framing
  PROTO = 0x80,
  FRAME = 0x95,
  STOP = '.',
  // the stack
  MARK = '(',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
  // containers
  EMPTY_DICT = '}',
  EMPTY_LIST = ']',
  EMPTY_TUPLE = ')',
  DICT = 'd',
  LIST = 'l',
  TUPLE = 't',
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  APPEND = 'a',
  APPENDS = 'e',
  SETITEM = 's',
  SETITEMS = 'u',
  // scalars
  NONE = 'N',
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  INT = 'I',
  LONG = 'L',
  FLOAT = 'F',
  BININT = 'J',
  BININT1 = 'K',
  BININT2 = 'M',
  LONG1 = 0x8a,
  LONG4 = 0x8b,
  BINFLOAT = 'G',
  UNICODE = 'V',
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE = 'X',
  BINUNICODE8 = 0x8d,
  SHORT_BINBYTES = 'C',
  BINBYTES = 'B',
  BINBYTES8 = 0x8e,
  // the memo
  MEMOIZE = 0x94,
  PUT = 'p',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  GET = 'g',
  BINGET = 'h',
  LONG_BINGET = 'j',
  // refused: they name a class, call one, or make what this reader does not
  GLOBAL = 'c',
  STACK_GLOBAL = 0x93,
  REDUCE = 'R',
  BUILD = 'b',
  NEWOBJ = 0x81,
  NEWOBJ_EX = 0x92,
  INST = 'i',
  OBJ = 'o',
  PERSID = 'P',
  BINPERSID = 'Q',
  EXT1 = 0x82,
  EXT2 = 0x83,
  EXT4 = 0x84,
  EMPTY_SET = 0x8f,
  ADDITEMS = 0x90,
  FROZENSET = 0x91,
  BYTEARRAY8 = 0x96,
  NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
  STRING = 'S',
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
};

/// What follows an opcode's byte.
enum class operand : std::uint8_t {
  none,
  fixed,    // `width` bytes
  counted,  // a little-endian length of `width` bytes (1, 4 or 8), then that many bytes
  line,     // text up to a '\n' (taken, not part of the text)
};

/// What an opcode does, as the passes group them.
enum class family : std::uint8_t {
  refused,    // never read (a refused opcode's operand is not described)
  framing,    // PROTO, FRAME, STOP
  stack,      // MARK, POP, POP_MARK, DUP
  container,  // makes or fills a list, tuple or dict
  scalar,     // pushes None, a bool, an int, a float, a str or bytes
  memo_put,   // stores the top of the stack in the memo (MEMOIZE: under the next key)
  memo_get,   // pushes a memoised value; its operand is the key
};

struct info {
  unsigned char code = 0;
  std::string_view name;  // empty: none of CPython's opcodes
  operand arg = operand::none;
  std::uint8_t width = 0;  // fixed: the operand's bytes; counted: its length's
  family kind = family::refused;

  [[nodiscard]] constexpr bool taken() const noexcept { return kind != family::refused; }
  /// The bytes of the opcode with a fixed operand (or none), the opcode's own byte included.
  [[nodiscard]] constexpr std::size_t length() const noexcept {
    return 1 + (arg == operand::fixed ? width : 0);
  }
};

/// Every opcode this reader knows, by byte. A new one is one line here (and, taken, its action
/// in reader::step()).
inline constexpr info kOpcodes[] = {
    {PROTO, "PROTO", operand::fixed, 1, family::framing},
    {FRAME, "FRAME", operand::fixed, 8, family::framing},
    {STOP, "STOP", operand::none, 0, family::framing},
    {MARK, "MARK", operand::none, 0, family::stack},
    {POP, "POP", operand::none, 0, family::stack},
    {POP_MARK, "POP_MARK", operand::none, 0, family::stack},
    {DUP, "DUP", operand::none, 0, family::stack},
    {EMPTY_DICT, "EMPTY_DICT", operand::none, 0, family::container},
    {EMPTY_LIST, "EMPTY_LIST", operand::none, 0, family::container},
    {EMPTY_TUPLE, "EMPTY_TUPLE", operand::none, 0, family::container},
    {DICT, "DICT", operand::none, 0, family::container},
    {LIST, "LIST", operand::none, 0, family::container},
    {TUPLE, "TUPLE", operand::none, 0, family::container},
    {TUPLE1, "TUPLE1", operand::none, 0, family::container},
    {TUPLE2, "TUPLE2", operand::none, 0, family::container},
    {TUPLE3, "TUPLE3", operand::none, 0, family::container},
    {APPEND, "APPEND", operand::none, 0, family::container},
    {APPENDS, "APPENDS", operand::none, 0, family::container},
    {SETITEM, "SETITEM", operand::none, 0, family::container},
    {SETITEMS, "SETITEMS", operand::none, 0, family::container},
    {NONE, "NONE", operand::none, 0, family::scalar},
    {NEWTRUE, "NEWTRUE", operand::none, 0, family::scalar},
    {NEWFALSE, "NEWFALSE", operand::none, 0, family::scalar},
    {INT, "INT", operand::line, 0, family::scalar},
    {LONG, "LONG", operand::line, 0, family::scalar},
    {FLOAT, "FLOAT", operand::line, 0, family::scalar},
    {BININT, "BININT", operand::fixed, 4, family::scalar},
    {BININT1, "BININT1", operand::fixed, 1, family::scalar},
    {BININT2, "BININT2", operand::fixed, 2, family::scalar},
    {LONG1, "LONG1", operand::counted, 1, family::scalar},
    {LONG4, "LONG4", operand::counted, 4, family::scalar},
    {BINFLOAT, "BINFLOAT", operand::fixed, 8, family::scalar},
    {UNICODE, "UNICODE", operand::line, 0, family::scalar},
    {SHORT_BINUNICODE, "SHORT_BINUNICODE", operand::counted, 1, family::scalar},
    {BINUNICODE, "BINUNICODE", operand::counted, 4, family::scalar},
    {BINUNICODE8, "BINUNICODE8", operand::counted, 8, family::scalar},
    {SHORT_BINBYTES, "SHORT_BINBYTES", operand::counted, 1, family::scalar},
    {BINBYTES, "BINBYTES", operand::counted, 4, family::scalar},
    {BINBYTES8, "BINBYTES8", operand::counted, 8, family::scalar},
    {MEMOIZE, "MEMOIZE", operand::none, 0, family::memo_put},
    {PUT, "PUT", operand::line, 0, family::memo_put},
    {BINPUT, "BINPUT", operand::fixed, 1, family::memo_put},
    {LONG_BINPUT, "LONG_BINPUT", operand::fixed, 4, family::memo_put},
    {GET, "GET", operand::line, 0, family::memo_get},
    {BINGET, "BINGET", operand::fixed, 1, family::memo_get},
    {LONG_BINGET, "LONG_BINGET", operand::fixed, 4, family::memo_get},
    // Refused, named in messages.
    {GLOBAL, "GLOBAL"},
    {STACK_GLOBAL, "STACK_GLOBAL"},
    {REDUCE, "REDUCE"},
    {BUILD, "BUILD"},
    {NEWOBJ, "NEWOBJ"},
    {NEWOBJ_EX, "NEWOBJ_EX"},
    {INST, "INST"},
    {OBJ, "OBJ"},
    {PERSID, "PERSID"},
    {BINPERSID, "BINPERSID"},
    {EXT1, "EXT1"},
    {EXT2, "EXT2"},
    {EXT4, "EXT4"},
    {EMPTY_SET, "EMPTY_SET"},
    {ADDITEMS, "ADDITEMS"},
    {FROZENSET, "FROZENSET"},
    {NEXT_BUFFER, "NEXT_BUFFER"},
    {READONLY_BUFFER, "READONLY_BUFFER"},
    {BYTEARRAY8, "BYTEARRAY8"},
    {STRING, "STRING"},
    {BINSTRING, "BINSTRING"},
    {SHORT_BINSTRING, "SHORT_BINSTRING"},
};

namespace detail {
constexpr std::array<info, 256> by_byte() {
  std::array<info, 256> t{};
  for (std::size_t i = 0; i < t.size(); ++i) t[i].code = static_cast<unsigned char>(i);
  for (const info& o : kOpcodes) {
    // Not a constant expression (a compile error) when a byte has two entries, when a taken
    // opcode's operand width is not what its kind allows, or a refused one describes one.
    if (!t[o.code].name.empty() || o.name.empty()) throw "pickle_ops: a byte twice, or no name";
    const bool ok =
        o.kind == family::refused
            ? o.arg == operand::none && o.width == 0
            : (o.arg == operand::none && o.width == 0) ||
                  (o.arg == operand::fixed && o.width >= 1 && o.width <= 8) ||
                  (o.arg == operand::counted && (o.width == 1 || o.width == 4 || o.width == 8)) ||
                  (o.arg == operand::line && o.width == 0);
    if (!ok) throw "pickle_ops: an operand that does not fit its kind";
    t[o.code] = o;
  }
  return t;
}
}  // namespace detail

/// The table by byte: 256 entries, a byte that is no opcode of CPython's refused and unnamed.
inline constexpr std::array<info, 256> kTable = detail::by_byte();

[[nodiscard]] constexpr const info& of(unsigned char op) noexcept {
  return kTable[op];
}
/// The bytes of an opcode with a fixed operand or none, its own byte included (BINGET: 2).
[[nodiscard]] constexpr std::size_t length(unsigned char op) noexcept {
  return of(op).length();
}
/// The operand's width: fixed, its bytes; counted, its length's bytes.
[[nodiscard]] constexpr std::size_t width(unsigned char op) noexcept {
  return of(op).width;
}

/// A little-endian unsigned integer of `n` bytes (at most 8) at `p`.
[[nodiscard]] inline std::uint64_t le(const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

/// The fixed operand of `Op` as a little-endian number, `p` at the opcode's byte (its width a
/// constant: BINGET's one byte, LONG_BINGET's four).
template <unsigned char Op>
[[nodiscard]] inline std::uint64_t fixed_le(const unsigned char* p) noexcept {
  static_assert(of(Op).arg == operand::fixed && of(Op).width <= 8);
  return le(p + 1, width(Op));
}

}  // namespace gpu_basics::pickle::ops

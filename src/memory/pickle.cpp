// The pickle machine for plain data (Lib/pickletools.py documents the opcodes). The reader keeps
// CPython's stack-and-marks model; the memo holds what PUT saw, and a GET or DUP shares it, not a
// copy. A container is open (changed in place, as APPENDS after EMPTY_LIST and PUT need, the memo
// seeing the changes) until it is put into another container or shared by GET or DUP; it is
// sealed from then on, and a later change goes to a shallow copy instead. So a pickle cannot make
// a cycle (a container can only gain elements while nothing holds it), and the nesting height and
// tree size kept in each container stay right. Each use of a memoised value counts its size as a
// tree against read_limits::max_values: a pickle that doubles a list through the memo 40 times is
// refused, and whoever walks the result walks no more than the budget.
#include "gpu_basics/memory/pickle.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"

namespace gpu_basics::pickle {

// ---- value --------------------------------------------------------------------------------

value value::boolean(bool b) {
  value v;
  v.d_ = b;
  return v;
}
value value::integer(std::int64_t i) {
  value v;
  v.d_ = i;
  return v;
}
value value::real(double d) {
  value v;
  v.d_ = d;
  return v;
}
value value::str(std::string s) {
  value v;
  v.d_ = str_data{std::make_shared<const std::string>(std::move(s))};
  return v;
}
value value::bytes(std::string b) {
  value v;
  v.d_ = bytes_data{std::make_shared<const std::string>(std::move(b))};
  return v;
}
namespace {
std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) noexcept {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
}  // namespace

value value::list(items it) {
  value v;
  auto n = std::make_shared<seq_node>();
  for (const auto& e : it) {
    n->height = std::max(n->height, e.height() + 1);
    n->values = add_saturating(n->values, e.tree_values());
  }
  n->v = std::move(it);
  v.d_ = std::move(n);
  return v;
}
value value::tuple(items it) {
  value v = list(std::move(it));
  std::get<std::shared_ptr<seq_node>>(v.d_)->tuple = true;
  return v;
}
value value::dict(entries e) {
  value v;
  auto n = std::make_shared<dict_node>();
  for (const auto& [k, x] : e) {
    n->height = std::max(n->height, x.height() + 1);
    n->values = add_saturating(n->values, add_saturating(k.tree_values(), x.tree_values()));
  }
  n->v = std::move(e);
  v.d_ = std::move(n);
  return v;
}

value::type value::kind() const noexcept {
  switch (d_.index()) {
    case 0:
      return type::none;
    case 1:
      return type::boolean;
    case 2:
      return type::integer;
    case 3:
      return type::real;
    case 4:
      return type::str;
    case 5:
      return type::bytes;
    case 6:
      return std::get<6>(d_)->tuple ? type::tuple : type::list;
    default:
      return type::dict;
  }
}

std::string_view value::type_name() const noexcept {
  switch (kind()) {
    case type::none:
      return "NoneType";
    case type::boolean:
      return "bool";
    case type::integer:
      return "int";
    case type::real:
      return "float";
    case type::str:
      return "str";
    case type::bytes:
      return "bytes";
    case type::list:
      return "list";
    case type::tuple:
      return "tuple";
    case type::dict:
      return "dict";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_type(const value& v, std::string_view want) {
  throw logic_error(fmt::format("pickle value: expected {}, got {}", want, v.type_name()));
}
}  // namespace

bool value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&d_)) return *b;
  wrong_type(*this, "bool");
}
std::int64_t value::as_int() const {
  if (const auto* i = std::get_if<std::int64_t>(&d_)) return *i;
  wrong_type(*this, "int");
}
double value::as_real() const {
  if (const auto* d = std::get_if<double>(&d_)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&d_)) return static_cast<double>(*i);
  wrong_type(*this, "float");
}
const std::string& value::as_str() const {
  if (const auto* s = std::get_if<str_data>(&d_)) return *s->s;
  if (const auto* b = std::get_if<bytes_data>(&d_)) return *b->s;
  wrong_type(*this, "str");
}
const items& value::as_items() const {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->v;
  wrong_type(*this, "list");
}
const entries& value::as_entries() const {
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->v;
  wrong_type(*this, "dict");
}

const value* value::find(std::string_view key) const noexcept {
  const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_);
  if (!n) return nullptr;
  for (const auto& [k, v] : (*n)->v)
    if (const auto* s = std::get_if<str_data>(&k.d_); s && *s->s == key) return &v;
  return nullptr;
}
const value* value::find(std::int64_t key) const noexcept {
  const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_);
  if (!n) return nullptr;
  for (const auto& [k, v] : (*n)->v)
    if (const auto* i = std::get_if<std::int64_t>(&k.d_); i && *i == key) return &v;
  return nullptr;
}

void value::append(value v) {
  auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_);
  if (!n) wrong_type(*this, "list");
  (*n)->height = std::max((*n)->height, v.height() + 1);
  (*n)->values = add_saturating((*n)->values, v.tree_values());
  (*n)->v.push_back(std::move(v));
}
void value::set(value key, value v) {
  auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_);
  if (!n) wrong_type(*this, "dict");
  (*n)->height = std::max((*n)->height, v.height() + 1);
  (*n)->values = add_saturating((*n)->values, add_saturating(key.tree_values(), v.tree_values()));
  (*n)->v.emplace_back(std::move(key), std::move(v));
}

std::uint32_t value::height() const noexcept {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->height;
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->height;
  return 0;
}

std::uint64_t value::tree_values() const noexcept {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->values;
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->values;
  return 1;
}

value value::clone() const {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) {
    items c;
    c.reserve((*n)->v.size());
    for (const auto& e : (*n)->v) c.push_back(e.clone());
    return (*n)->tuple ? tuple(std::move(c)) : list(std::move(c));
  }
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) {
    entries c;
    c.reserve((*n)->v.size());
    for (const auto& [k, v] : (*n)->v) c.emplace_back(k.clone(), v.clone());
    return dict(std::move(c));
  }
  return *this;
}

bool operator==(const value& a, const value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case value::type::none:
      return true;
    case value::type::boolean:
      return a.as_bool() == b.as_bool();
    case value::type::integer:
      return a.as_int() == b.as_int();
    case value::type::real: {
      const double x = a.as_real(), y = b.as_real();
      return x == y || (x != x && y != y);
    }
    case value::type::str:
    case value::type::bytes:
      return a.as_str() == b.as_str();
    case value::type::list:
    case value::type::tuple:
      return a.as_items() == b.as_items();
    case value::type::dict:
      return a.as_entries() == b.as_entries();
  }
  return false;
}

// ---- reader -------------------------------------------------------------------------------

namespace {

/// CPython's opcode names, for messages about opcodes this reader does not take.
std::string opcode_name(unsigned char op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    case 0x96:
      return "BYTEARRAY8";
    case 'S':
      return "STRING";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    default:
      return fmt::format("opcode 0x{:02x}", op);
  }
}

}  // namespace

class reader {
 public:
  /// Thrown instead of a "truncated" error when reading a prefix (check_start()).
  struct end_of_prefix {};

  reader(std::string_view in, read_limits limits, bool prefix = false)
      : in_(in), limits_(limits), prefix_(prefix) {
    if (limits_.max_values == 0)
      limits_.max_values =
          std::max<std::size_t>(50'000'000, in.size() > SIZE_MAX / 8 ? SIZE_MAX : in.size() * 8);
  }

  value run() {
    for (std::size_t ops = 0;; ++ops) {
      if ((ops & 0xffff) == 0) throw_if_interrupted();
      if (pos_ >= in_.size()) truncated("truncated: the stream ends before STOP", pos_);
      op_at_ = pos_;
      const auto op = static_cast<unsigned char>(in_[pos_++]);
      if (op == '.') break;
      step(op);
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail(fmt::format("STOP with {} values on the stack{}", stack_.size(),
                       marks_.empty() ? "" : " and an open MARK"),
           op_at_);
    if (pos_ != in_.size() && !prefix_)  // a prefix: the file's length decides
      fail(fmt::format("{} bytes after STOP", in_.size() - pos_), pos_);
    return std::move(stack_.back());
  }

 private:
  std::string_view in_;
  read_limits limits_;
  bool prefix_ = false;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  std::uint64_t made_ = 0;
  std::vector<value> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, value> memo_;

  [[noreturn]] static void fail(const std::string& what, std::size_t at) {
    throw format_error(fmt::format("pickle: {} at offset {}", what, at));
  }

  [[noreturn]] void truncated(const std::string& what, std::size_t at) const {
    if (prefix_) throw end_of_prefix{};
    fail(what, at);
  }

  std::string_view take(std::size_t n, std::string_view what) {
    if (n > in_.size() - pos_)
      truncated(fmt::format("truncated: {} of {} bytes, {} left", what, n, in_.size() - pos_),
                pos_);
    const auto s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::uint64_t le(std::size_t n, std::string_view what) {
    const auto s = take(n, what);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(s[i]);
    return v;
  }
  std::string_view line(std::string_view what) {
    const auto nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos)
      truncated(fmt::format("truncated: {} without its newline", what), pos_);
    const auto s = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  void count(std::uint64_t n = 1) {
    made_ = add_saturating(made_, n);
    if (made_ > limits_.max_values)
      fail(fmt::format("more than {} values", limits_.max_values), op_at_);
  }
  void push(value v) {
    count();
    stack_.push_back(std::move(v));
  }
  value pop(std::string_view op) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail(fmt::format("{} on an empty stack", op), op_at_);
    value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  value& top(std::string_view op) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail(fmt::format("{} on an empty stack", op), op_at_);
    return stack_.back();
  }
  std::size_t pop_mark(std::string_view op) {
    if (marks_.empty()) fail(fmt::format("{} without a MARK", op), op_at_);
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  void check_depth(const value& child) {
    if (child.height() + 1 > limits_.max_depth)
      fail(fmt::format("nesting deeper than {}", limits_.max_depth), op_at_);
  }
  /// Marks `v` (a container) as shared or placed: it never changes again.
  static void seal(const value& v) {
    if (const auto* n = std::get_if<std::shared_ptr<value::seq_node>>(&v.d_)) (*n)->sealed = true;
    if (const auto* n = std::get_if<std::shared_ptr<value::dict_node>>(&v.d_)) (*n)->sealed = true;
  }
  /// Before `c` (a stack slot) changes: a sealed container is replaced by a shallow copy, open.
  void unshare(value& c) {
    if (const auto* n = std::get_if<std::shared_ptr<value::seq_node>>(&c.d_); n && (*n)->sealed) {
      count((*n)->v.size());
      c = (*n)->tuple ? value::tuple((*n)->v) : value::list((*n)->v);
    } else if (const auto* d = std::get_if<std::shared_ptr<value::dict_node>>(&c.d_);
               d && (*d)->sealed) {
      count((*d)->v.size());
      c = value::dict((*d)->v);
    }
  }
  void add_item(value& seq, value v, std::string_view op) {
    if (!seq.is(value::type::list))
      fail(fmt::format("{} to a {}, not a list", op, seq.type_name()), op_at_);
    check_depth(v);
    seal(v);
    unshare(seq);
    seq.append(std::move(v));
  }
  void add_entry(value& d, value k, value v, std::string_view op) {
    if (!d.is(value::type::dict))
      fail(fmt::format("{} on a {}, not a dict", op, d.type_name()), op_at_);
    if (!k.is(value::type::str) && !k.is(value::type::integer))
      fail(fmt::format("a dict key of type {} (only str and int keys are read)", k.type_name()),
           op_at_);
    check_depth(v);
    seal(v);
    unshare(d);
    d.set(std::move(k), std::move(v));
  }
  value sequence_from(std::size_t mark, bool tuple) {
    items v(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
            std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    for (const auto& e : v) {
      check_depth(e);
      seal(e);
    }
    return tuple ? value::tuple(std::move(v)) : value::list(std::move(v));
  }
  /// A second use of `v` (GET, DUP): shared, sealed, and counted at its size as a tree.
  void push_shared(value v) {
    count(v.tree_values());
    seal(v);
    stack_.push_back(std::move(v));
  }
  void put(std::uint64_t i) { memo_[i] = top("PUT"); }
  void get(std::uint64_t i) {
    const auto it = memo_.find(i);
    if (it == memo_.end()) fail(fmt::format("GET of memo {} that was never PUT", i), op_at_);
    push_shared(it->second);
  }
  std::uint64_t decimal(std::string_view s, std::string_view what) {
    std::uint64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
      fail(fmt::format("{}: not a number", what), op_at_);
    return v;
  }
  /// A little-endian two's-complement integer of `n` bytes, which must fit 64 bits.
  std::int64_t long_bytes(std::size_t n) {
    const auto s = take(n, "LONG");
    if (n == 0) return 0;
    const bool negative = (static_cast<unsigned char>(s[n - 1]) & 0x80) != 0;
    const unsigned char fill = negative ? 0xff : 0x00;
    for (std::size_t i = 8; i < n; ++i)
      if (static_cast<unsigned char>(s[i]) != fill) fail("an int beyond 64 bits", op_at_);
    if (n > 8 && ((static_cast<unsigned char>(s[7]) & 0x80) != 0) != negative)
      fail("an int beyond 64 bits", op_at_);
    std::uint64_t u = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 8); ++i) {
      u &= ~(std::uint64_t{0xff} << (8 * i));
      u |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
    }
    return static_cast<std::int64_t>(u);
  }
  /// UNICODE's raw-unicode-escape text: bytes are Latin-1, \uXXXX and \UXXXXXXXX escapes.
  static std::string raw_unicode(std::string_view s) {
    std::string out;
    const auto put_cp = [&](std::uint32_t cp) {
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      }
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
        const std::size_t n = s[i + 1] == 'u' ? 4 : 8;
        std::uint32_t cp = 0;
        const auto r =
            std::from_chars(s.data() + i + 2, s.data() + std::min(s.size(), i + 2 + n), cp, 16);
        if (i + 2 + n <= s.size() && r.ec == std::errc{} && r.ptr == s.data() + i + 2 + n &&
            cp <= 0x10ffff) {
          put_cp(cp);
          i += 1 + n;
          continue;
        }
      }
      put_cp(static_cast<unsigned char>(s[i]));
    }
    return out;
  }

  void step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        const auto v = le(1, "PROTO");
        if (v > 5) fail(fmt::format("protocol {} (this reader knows 0-5)", v), op_at_);
        break;
      }
      case 0x95:  // FRAME: a length only; frames need no handling
        (void)le(8, "FRAME");
        break;
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        (void)pop("POP");
        break;
      case '1':  // POP_MARK
        stack_.resize(pop_mark("POP_MARK"));
        break;
      case '2':  // DUP
        push_shared(top("DUP"));
        break;
      case '}':  // EMPTY_DICT
        push(value::dict());
        break;
      case ']':  // EMPTY_LIST
        push(value::list());
        break;
      case ')':  // EMPTY_TUPLE
        push(value::tuple());
        break;
      case 'd': {  // DICT
        const std::size_t m = pop_mark("DICT");
        if ((stack_.size() - m) % 2 != 0) fail("DICT with an odd number of items", op_at_);
        value d = value::dict();
        for (std::size_t i = m; i < stack_.size(); i += 2)
          add_entry(d, std::move(stack_[i]), std::move(stack_[i + 1]), "DICT");
        stack_.resize(m);
        push(std::move(d));
        break;
      }
      case 'l':    // LIST
      case 't': {  // TUPLE
        const std::size_t m = pop_mark(op == 'l' ? "LIST" : "TUPLE");
        push(sequence_from(m, op == 't'));
        break;
      }
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const std::size_t n = op - 0x84u;
        if (stack_.size() < n || (!marks_.empty() && stack_.size() - n < marks_.back()))
          fail(fmt::format("TUPLE{} with fewer than {} values", n, n), op_at_);
        push(sequence_from(stack_.size() - n, true));
        break;
      }
      case 'a': {  // APPEND
        value v = pop("APPEND");
        add_item(top("APPEND"), std::move(v), "APPEND");
        break;
      }
      case 'e': {  // APPENDS
        const std::size_t m = pop_mark("APPENDS");
        if (m == 0) fail("APPENDS with no list below its MARK", op_at_);
        value& seq = stack_[m - 1];
        for (std::size_t i = m; i < stack_.size(); ++i)
          add_item(seq, std::move(stack_[i]), "APPENDS");
        stack_.resize(m);
        break;
      }
      case 's': {  // SETITEM
        value v = pop("SETITEM");
        value k = pop("SETITEM");
        add_entry(top("SETITEM"), std::move(k), std::move(v), "SETITEM");
        break;
      }
      case 'u': {  // SETITEMS
        const std::size_t m = pop_mark("SETITEMS");
        if (m == 0) fail("SETITEMS with no dict below its MARK", op_at_);
        if ((stack_.size() - m) % 2 != 0) fail("SETITEMS with an odd number of items", op_at_);
        value& d = stack_[m - 1];
        for (std::size_t i = m; i < stack_.size(); i += 2)
          add_entry(d, std::move(stack_[i]), std::move(stack_[i + 1]), "SETITEMS");
        stack_.resize(m);
        break;
      }
      case 'N':  // NONE
        push(value());
        break;
      case 0x88:  // NEWTRUE
        push(value::boolean(true));
        break;
      case 0x89:  // NEWFALSE
        push(value::boolean(false));
        break;
      case 'I': {  // INT: decimal text; "00" / "01" are False / True in protocol 0
        const auto s = line("INT");
        if (s == "00" || s == "01") {
          push(value::boolean(s == "01"));
          break;
        }
        std::int64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
          fail("INT: not a 64-bit integer", op_at_);
        push(value::integer(v));
        break;
      }
      case 'L': {  // LONG (protocol 0): decimal text ending in 'L'
        auto s = line("LONG");
        if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
        std::int64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
          fail("LONG: not a 64-bit integer", op_at_);
        push(value::integer(v));
        break;
      }
      case 'F': {  // FLOAT (protocol 0): repr() text
        const std::string s(line("FLOAT"));
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) fail("FLOAT: not a number", op_at_);
        push(value::real(d));
        break;
      }
      case 'J':  // BININT
        push(
            value::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4, "BININT")))));
        break;
      case 'K':  // BININT1
        push(value::integer(static_cast<std::int64_t>(le(1, "BININT1"))));
        break;
      case 'M':  // BININT2
        push(value::integer(static_cast<std::int64_t>(le(2, "BININT2"))));
        break;
      case 0x8a:  // LONG1
        push(value::integer(long_bytes(le(1, "LONG1"))));
        break;
      case 0x8b:  // LONG4
        push(value::integer(long_bytes(le(4, "LONG4"))));
        break;
      case 'G': {  // BINFLOAT: big-endian IEEE 754
        const auto s = take(8, "BINFLOAT");
        std::uint64_t u = 0;
        for (char c : s) u = (u << 8) | static_cast<unsigned char>(c);
        push(value::real(std::bit_cast<double>(u)));
        break;
      }
      case 'V':  // UNICODE
        push(value::str(raw_unicode(line("UNICODE"))));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push(value::str(std::string(take(le(1, "SHORT_BINUNICODE"), "SHORT_BINUNICODE"))));
        break;
      case 'X':  // BINUNICODE
        push(value::str(std::string(take(le(4, "BINUNICODE"), "BINUNICODE"))));
        break;
      case 0x8d:  // BINUNICODE8
        push(value::str(std::string(take(le(8, "BINUNICODE8"), "BINUNICODE8"))));
        break;
      case 'C':  // SHORT_BINBYTES
        push(value::bytes(std::string(take(le(1, "SHORT_BINBYTES"), "SHORT_BINBYTES"))));
        break;
      case 'B':  // BINBYTES
        push(value::bytes(std::string(take(le(4, "BINBYTES"), "BINBYTES"))));
        break;
      case 0x8e:  // BINBYTES8
        push(value::bytes(std::string(take(le(8, "BINBYTES8"), "BINBYTES8"))));
        break;
      case 0x94:  // MEMOIZE
        put(memo_.size());
        break;
      case 'p':  // PUT
        put(decimal(line("PUT"), "PUT"));
        break;
      case 'q':  // BINPUT
        put(le(1, "BINPUT"));
        break;
      case 'r':  // LONG_BINPUT
        put(le(4, "LONG_BINPUT"));
        break;
      case 'g':  // GET
        get(decimal(line("GET"), "GET"));
        break;
      case 'h':  // BINGET
        get(le(1, "BINGET"));
        break;
      case 'j':  // LONG_BINGET
        get(le(4, "LONG_BINGET"));
        break;
      default:
        fail(fmt::format("{} (only plain data is read: no classes, no calls)", opcode_name(op)),
             op_at_);
    }
  }
};

value read(std::string_view bytes, read_limits limits) {
  return reader(bytes, limits).run();
}

void check_start(std::string_view head) {
  try {
    (void)reader(head, {}, true).run();
  } catch (const reader::end_of_prefix&) {
    // Plausible so far: the rest decides.
  }
}

// ---- writer -------------------------------------------------------------------------------

namespace {

constexpr std::size_t kBatch = 1000;  // items per APPENDS / SETITEMS, as CPython
constexpr std::uint32_t kMaxDepth = 1000;
constexpr std::size_t kMemoStringMax = 64;  // repeated strings up to this long are memoized

bool holds_bytes(const value& v) {
  switch (v.kind()) {
    case value::type::bytes:
      return true;
    case value::type::list:
    case value::type::tuple:
      return std::any_of(v.as_items().begin(), v.as_items().end(), holds_bytes);
    case value::type::dict:
      return std::any_of(v.as_entries().begin(), v.as_entries().end(), [](const auto& e) {
        return holds_bytes(e.first) || holds_bytes(e.second);
      });
    default:
      return false;
  }
}

class writer {
 public:
  explicit writer(std::ostream& out) : out_(out) {}

  void write_root(const value& v) {
    out_.put(static_cast<char>(0x80));
    out_.put(static_cast<char>(holds_bytes(v) ? 3 : 2));
    write(v, 0);
    out_.put('.');
  }

 private:
  std::ostream& out_;
  std::unordered_map<std::string, std::uint32_t> strings_;

  void u32(std::uint32_t n) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out_.write(b, 4);
  }
  void integer(std::int64_t i) {
    if (i >= 0 && i < 256) {
      out_.put('K');
      out_.put(static_cast<char>(i));
    } else if (i >= 0 && i < 65536) {
      out_.put('M');
      out_.put(static_cast<char>(i & 0xff));
      out_.put(static_cast<char>(i >> 8));
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      out_.put('J');
      u32(static_cast<std::uint32_t>(static_cast<std::int32_t>(i)));
    } else {  // LONG1: the fewest little-endian two's-complement bytes
      const auto u = static_cast<std::uint64_t>(i);
      std::size_t n = 8;
      while (n > 1) {
        const auto top = static_cast<unsigned char>(u >> (8 * (n - 1)));
        const auto next_sign = (static_cast<unsigned char>(u >> (8 * (n - 2))) & 0x80) != 0;
        if ((top == 0x00 && !next_sign) || (top == 0xff && next_sign))
          --n;
        else
          break;
      }
      out_.put(static_cast<char>(0x8a));
      out_.put(static_cast<char>(n));
      for (std::size_t k = 0; k < n; ++k) out_.put(static_cast<char>((u >> (8 * k)) & 0xff));
    }
  }
  void memo_ref(std::uint32_t i, bool get) {
    if (i < 256) {
      out_.put(get ? 'h' : 'q');
      out_.put(static_cast<char>(i));
    } else {
      out_.put(get ? 'j' : 'r');
      u32(i);
    }
  }
  void string(const std::string& s) {
    const bool memo = s.size() <= kMemoStringMax;
    if (memo) {
      if (const auto it = strings_.find(s); it != strings_.end()) {
        memo_ref(it->second, true);
        return;
      }
    }
    if (s.size() > UINT32_MAX) throw logic_error("pickle: a str longer than 4 GiB");
    out_.put('X');
    u32(static_cast<std::uint32_t>(s.size()));
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
    if (memo) {
      const auto i = static_cast<std::uint32_t>(strings_.size());
      strings_.emplace(s, i);
      memo_ref(i, false);
    }
  }
  void write(const value& v, std::uint32_t depth) {
    if (depth > kMaxDepth) throw logic_error("pickle: a value nests deeper than 1000");
    switch (v.kind()) {
      case value::type::none:
        out_.put('N');
        break;
      case value::type::boolean:
        out_.put(static_cast<char>(v.as_bool() ? 0x88 : 0x89));
        break;
      case value::type::integer:
        integer(v.as_int());
        break;
      case value::type::real: {
        const auto u = std::bit_cast<std::uint64_t>(v.as_real());
        out_.put('G');
        for (int i = 7; i >= 0; --i) out_.put(static_cast<char>((u >> (8 * i)) & 0xff));
        break;
      }
      case value::type::str:
        string(v.as_str());
        break;
      case value::type::bytes: {
        const auto& s = v.as_str();
        if (s.size() > UINT32_MAX) throw logic_error("pickle: bytes longer than 4 GiB");
        out_.put('B');
        u32(static_cast<std::uint32_t>(s.size()));
        out_.write(s.data(), static_cast<std::streamsize>(s.size()));
        break;
      }
      case value::type::tuple: {
        const auto& it = v.as_items();
        if (it.empty()) {
          out_.put(')');
          break;
        }
        if (it.size() > 3) out_.put('(');
        for (const auto& e : it) write(e, depth + 1);
        out_.put(static_cast<char>(it.size() > 3 ? 't' : 0x84 + it.size()));
        break;
      }
      case value::type::list: {
        out_.put(']');
        const auto& it = v.as_items();
        for (std::size_t i = 0; i < it.size(); i += kBatch) {
          out_.put('(');
          for (std::size_t k = i; k < std::min(it.size(), i + kBatch); ++k) write(it[k], depth + 1);
          out_.put('e');
        }
        break;
      }
      case value::type::dict: {
        out_.put('}');
        const auto& en = v.as_entries();
        for (std::size_t i = 0; i < en.size(); i += kBatch) {
          out_.put('(');
          for (std::size_t k = i; k < std::min(en.size(), i + kBatch); ++k) {
            write(en[k].first, depth + 1);
            write(en[k].second, depth + 1);
          }
          out_.put('u');
        }
        break;
      }
    }
  }
};

}  // namespace

void write(std::ostream& out, const value& v) {
  writer(out).write_root(v);
}

std::string dumps(const value& v) {
  std::ostringstream s;
  write(s, v);
  return std::move(s).str();
}

}  // namespace gpu_basics::pickle

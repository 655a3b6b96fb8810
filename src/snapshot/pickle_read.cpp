// The pickle machine for plain data (Lib/pickletools.py documents the opcodes). The reader keeps
// CPython's stack-and-marks model; the memo holds what PUT saw, and a GET or DUP shares it, not a
// copy. A container is open (changed in place, as APPENDS after EMPTY_LIST and PUT need, the memo
// seeing the changes) until it is put into another container or shared by GET or DUP; it is
// sealed from then on, and a later change goes to a shallow copy instead. So a pickle cannot make
// a cycle (a container can only gain elements while nothing holds it), and the nesting height and
// tree size kept in each container stay right. Each use of a memoised value counts its size as a
// tree against read_limits::max_values: a pickle that doubles a list through the memo 40 times is
// refused, and whoever walks the result walks no more than the budget.
//
// Large pickles (a snapshot of 10 million trace entries is over a GB) are read in two passes over
// a window of the input (a chunk of a file at a time): the first counts the uses (GET) of each
// memo key, so that the second keeps a memoised value only while a use of it is ahead (CPython
// memoises every str, list and dict it writes; almost none is used again). Two options cut what
// the second pass holds further. Under an opaque key (read_options::opaque_keys), a container is
// "left out": its node keeps its nesting height and type, so every check is made as before, but
// not its items, and a use of a memoised value there is a left_out_use, no copy; None takes its
// place in the dict. An item sink takes a list's items as they are appended. Should a left-out
// value be needed elsewhere (placed under another key, in a list, as the result), or a list with
// taken items be copied, the read starts over without the options (`escaped`): what a caller gets
//
// This file: the second pass's loop and step() (each opcode's action; its operand as the opcode
// table gives it), the containers and the memo, and read() / check_start(). The batches read
// straight from the bytes are in pickle_read_batch.cpp, the first pass in pickle_first_pass.cpp.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "pickle_reader.hpp"

namespace gpu_basics::pickle {

namespace {
/// CPython's name of an opcode, for messages about opcodes this reader does not take.
std::string opcode_name(unsigned char op) {
  const auto& o = ops::of(op);
  return o.name.empty() ? fmt::format("opcode 0x{:02x}", op) : std::string(o.name);
}
}  // namespace

value reader::run() {
  for (;; ++ops_) {
    if ((ops_ & 0xffff) == 0) throw_if_interrupted();
    if (!in_.has(1)) truncated("truncated: the stream ends before STOP", in_.offset());
    op_at_ = in_.offset();
    const auto op = in_.next();
    if (op == ops::STOP) break;
    step(op);
  }
  if (stack_.size() != 1 || !marks_.empty())
    fail(fmt::format("STOP with {} values on the stack{}", stack_.size(),
                     marks_.empty() ? "" : " and an open MARK"),
         op_at_);
  if (!prefix_)  // a prefix: the file's length decides
    if (const std::uint64_t rest = in_.rest(); rest != 0)
      fail(fmt::format("{} bytes after STOP", rest), op_at_ + 1);
  if (left_out(stack_.back())) throw escaped{};
  return std::move(stack_.back());
}

void reader::fail(const std::string& what, std::uint64_t at) {
  throw format_error(fmt::format("pickle: {} at offset {}", what, at));
}

void reader::truncated(const std::string& what, std::uint64_t at) const {
  if (prefix_) throw end_of_prefix{};
  fail(what, at);
}

std::string_view reader::take(std::uint64_t n, std::string_view what) {
  if (n > SIZE_MAX || !in_.has(static_cast<std::size_t>(n)))
    truncated(fmt::format("truncated: {} of {} bytes, {} left", what, n, in_.left()), in_.offset());
  return in_.take(static_cast<std::size_t>(n));
}

std::uint64_t reader::le(std::size_t n, std::string_view what) {
  const auto s = take(n, what);
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

std::uint64_t reader::fixed(unsigned char op) {
  const ops::info& o = ops::of(op);
  return le(o.width, o.name);
}

std::string_view reader::fixed_bytes(unsigned char op) {
  const ops::info& o = ops::of(op);
  return take(o.width, o.name);
}

std::uint64_t reader::length_of(unsigned char op) {
  const ops::info& o = ops::of(op);
  return le(o.width, o.name);
}

std::string_view reader::counted(unsigned char op) {
  const ops::info& o = ops::of(op);
  return take(le(o.width, o.name), o.name);
}

std::string_view reader::line(std::string_view what) {
  const auto s = in_.line();
  if (!s) truncated(fmt::format("truncated: {} without its newline", what), in_.offset());
  return *s;
}

void reader::push(value v) {
  count();
  stack_.push_back(std::move(v));
}

value reader::pop(std::string_view op) {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
    fail(fmt::format("{} on an empty stack", op), op_at_);
  value v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

value& reader::top(std::string_view op) {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
    fail(fmt::format("{} on an empty stack", op), op_at_);
  return stack_.back();
}

std::size_t reader::pop_mark(std::string_view op) {
  if (marks_.empty()) fail(fmt::format("{} without a MARK", op), op_at_);
  const std::size_t m = marks_.back();
  marks_.pop_back();
  return m;
}

void reader::check_depth(const value& child) {
  if (child.height() + 1 > limits_.max_depth)
    fail(fmt::format("nesting deeper than {}", limits_.max_depth), op_at_);
}

bool reader::leaves_out(std::size_t at) const {
  if (opaque_.empty() || marks_.empty()) return false;
  const std::size_t m = marks_.back();
  if (m > 0 && left_out(stack_[m - 1])) return true;
  return at > m && (at - m) % 2 == 1 && opaque_key(stack_[at - 1]);
}

void reader::grow(value& c, const value& v, const value* k) {
  const auto grown = [&](auto& n) {
    n.height = std::max(n.height, v.height() + 1);
    n.values = add_saturating(n.values, add_saturating(v.tree_size(), k ? 1 : 0));
  };
  if (auto* n = std::get_if<seq_ptr>(&c.d_)) grown(**n);
  if (auto* n = std::get_if<dict_ptr>(&c.d_)) grown(**n);
  if (auto* u = std::get_if<value::left_out_use>(&c.d_))
    u->height = std::max(u->height, v.height() + 1);
}

void reader::push_use(const value& v) {
  count();
  value u;
  u.d_ = value::left_out_use{v.height(), v.kind()};
  stack_.push_back(std::move(u));
}

void reader::unshare(value& c) {
  if (const auto* n = std::get_if<seq_ptr>(&c.d_); n && (*n)->sealed) {
    const value::seq_node& old = **n;
    if (old.taken) throw escaped{};
    count(old.v.size());
    value copy = old.tuple ? value::tuple(old.v) : value::list(old.v);
    if (old.left_out) {
      auto& fresh = *std::get<seq_ptr>(copy.d_);
      fresh.left_out = true;
      fresh.height = old.height;
      fresh.values = old.values;
    }
    c = std::move(copy);
  } else if (const auto* d = std::get_if<dict_ptr>(&c.d_); d && (*d)->sealed) {
    const value::dict_node& old = **d;
    count(old.v.size());
    value copy = value::dict(old.v);
    if (old.left_out) {
      auto& fresh = *std::get<dict_ptr>(copy.d_);
      fresh.left_out = true;
      fresh.height = old.height;
      fresh.values = old.values;
    }
    c = std::move(copy);
  }
}

void reader::add_item(value& seq, value v, std::string_view op) {
  if (!seq.is(value::type::list))
    fail(fmt::format("{} to a {}, not a list", op, seq.type_name()), op_at_);
  check_depth(v);
  if (left_out(seq)) {
    unshare(seq);
    grow(seq, v);
    return;
  }
  if (left_out(v)) throw escaped{};
  seal(v);
  unshare(seq);
  if (sink_) {
    auto& n = *std::get<seq_ptr>(seq.d_);
    if (n.v.empty()) {  // every item so far taken
      if (n.list_id == 0) n.list_id = ++lists_;
      if (sink_->take(n.list_id, v)) {
        ++n.taken;
        grow(seq, v);
        return;
      }
    }
  }
  seq.append(std::move(v));
}

void reader::add_entry(value& d, value k, value v, std::string_view op) {
  if (!d.is(value::type::dict))
    fail(fmt::format("{} on a {}, not a dict", op, d.type_name()), op_at_);
  if (!k.is(value::type::str) && !k.is(value::type::integer))
    fail(fmt::format("a dict key of type {} (only str and int keys are read)", k.type_name()),
         op_at_);
  check_depth(v);
  if (left_out(d)) {
    unshare(d);
    grow(d, v, &k);
    return;
  }
  if (left_out(k)) throw escaped{};
  std::uint32_t height = 0;
  if (left_out(v)) {  // None in its place, the height kept
    if (!opaque_key(k)) throw escaped{};
    height = v.height();
    v = value();
  }
  seal(v);
  unshare(d);
  d.set(std::move(k), std::move(v));
  auto& n = *std::get<dict_ptr>(d.d_);
  n.height = std::max(n.height, height + 1);
}

value reader::sequence_from(std::size_t mark, bool tuple) {
  const auto first = stack_.begin() + static_cast<std::ptrdiff_t>(mark);
  if (leaves_out(mark)) {
    value c = container(tuple ? value::type::tuple : value::type::list, true);
    for (auto it = first; it != stack_.end(); ++it) {
      check_depth(*it);
      grow(c, *it);
    }
    stack_.resize(mark);
    return c;
  }
  items v(std::make_move_iterator(first), std::make_move_iterator(stack_.end()));
  stack_.resize(mark);
  for (const auto& e : v) {
    check_depth(e);
    if (left_out(e)) throw escaped{};
    seal(e);
  }
  return tuple ? value::tuple(std::move(v)) : value::list(std::move(v));
}

void reader::push_shared(value v) {
  if (leaves_out(stack_.size())) {
    push_use(v);
    return;
  }
  count(v.tree_size());
  seal(v);
  stack_.push_back(std::move(v));
}

void reader::put(std::uint64_t i) {
  value& v = top("PUT");
  memo_keys_.add(i);
  if (uses_.ahead(i)) memo_.put(i, v);
}

void reader::get(std::uint64_t i) {
  const value* v = memo_.find(i);
  if (!v) fail(fmt::format("GET of memo {} that was never PUT", i), op_at_);
  if (uses_.use(i))
    push_shared(*v);
  else  // its last use
    push_shared(memo_.take(i));
}

std::uint64_t reader::decimal(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
    fail(fmt::format("{}: not a number", what), op_at_);
  return v;
}

std::int64_t reader::long_bytes(std::size_t n) {
  const auto v = long_value(take(n, "LONG"));
  if (!v) fail("an int beyond 64 bits", op_at_);
  return *v;
}

std::string reader::raw_unicode(std::string_view s) {
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

void reader::step(unsigned char op) {
  switch (op) {
    case ops::PROTO: {
      const auto v = fixed(ops::PROTO);
      if (v > 5) fail(fmt::format("protocol {} (this reader knows 0-5)", v), op_at_);
      break;
    }
    case ops::FRAME:  // a length only; frames need no handling
      (void)fixed(ops::FRAME);
      break;
    case ops::MARK:
      marks_.push_back(stack_.size());
      if (!stack_.empty() && left_out(stack_.back()))
        left_out_batch();
      else if (!stack_.empty() && taking(stack_.back()))
        taking_batch();
      break;
    case ops::POP:
      (void)pop("POP");
      break;
    case ops::POP_MARK:
      stack_.resize(pop_mark("POP_MARK"));
      break;
    case ops::DUP:
      push_shared(top("DUP"));
      break;
    case ops::EMPTY_DICT:
      push(container(value::type::dict, leaves_out(stack_.size())));
      break;
    case ops::EMPTY_LIST:
      push(container(value::type::list, leaves_out(stack_.size())));
      break;
    case ops::EMPTY_TUPLE:
      push(container(value::type::tuple, leaves_out(stack_.size())));
      break;
    case ops::DICT: {
      const std::size_t m = pop_mark("DICT");
      if ((stack_.size() - m) % 2 != 0) fail("DICT with an odd number of items", op_at_);
      value d = container(value::type::dict, leaves_out(m));
      for (std::size_t i = m; i < stack_.size(); i += 2)
        add_entry(d, std::move(stack_[i]), std::move(stack_[i + 1]), "DICT");
      stack_.resize(m);
      push(std::move(d));
      break;
    }
    case ops::LIST:
    case ops::TUPLE: {
      const std::size_t m = pop_mark(ops::of(op).name);
      push(sequence_from(m, op == ops::TUPLE));
      break;
    }
    case ops::TUPLE1:
    case ops::TUPLE2:
    case ops::TUPLE3: {
      const std::size_t n = op - ops::TUPLE1 + 1u;
      if (stack_.size() < n || (!marks_.empty() && stack_.size() - n < marks_.back()))
        fail(fmt::format("TUPLE{} with fewer than {} values", n, n), op_at_);
      push(sequence_from(stack_.size() - n, true));
      break;
    }
    case ops::APPEND: {
      value v = pop("APPEND");
      add_item(top("APPEND"), std::move(v), "APPEND");
      break;
    }
    case ops::APPENDS: {
      const std::size_t m = pop_mark("APPENDS");
      if (m == 0) fail("APPENDS with no list below its MARK", op_at_);
      value& seq = stack_[m - 1];
      for (std::size_t i = m; i < stack_.size(); ++i)
        add_item(seq, std::move(stack_[i]), "APPENDS");
      stack_.resize(m);
      break;
    }
    case ops::SETITEM: {
      value v = pop("SETITEM");
      value k = pop("SETITEM");
      add_entry(top("SETITEM"), std::move(k), std::move(v), "SETITEM");
      break;
    }
    case ops::SETITEMS: {
      const std::size_t m = pop_mark("SETITEMS");
      if (m == 0) fail("SETITEMS with no dict below its MARK", op_at_);
      if ((stack_.size() - m) % 2 != 0) fail("SETITEMS with an odd number of items", op_at_);
      value& d = stack_[m - 1];
      if (auto* n = std::get_if<dict_ptr>(&d.d_); n && !(*n)->sealed && !(*n)->left_out)
        (*n)->v.reserve((*n)->v.size() + (stack_.size() - m) / 2);
      for (std::size_t i = m; i < stack_.size(); i += 2)
        add_entry(d, std::move(stack_[i]), std::move(stack_[i + 1]), "SETITEMS");
      stack_.resize(m);
      break;
    }
    case ops::NONE:
      push(value());
      break;
    case ops::NEWTRUE:
      push(value::boolean(true));
      break;
    case ops::NEWFALSE:
      push(value::boolean(false));
      break;
    case ops::INT: {  // decimal text; "00" / "01" are False / True in protocol 0
      const auto s = line(ops::of(ops::INT).name);
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
    case ops::LONG: {  // protocol 0: decimal text ending in 'L'
      auto s = line(ops::of(ops::LONG).name);
      if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
      std::int64_t v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
        fail("LONG: not a 64-bit integer", op_at_);
      push(value::integer(v));
      break;
    }
    case ops::FLOAT: {  // protocol 0: repr() text
      const std::string s(line(ops::of(ops::FLOAT).name));
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) fail("FLOAT: not a number", op_at_);
      push(value::real(d));
      break;
    }
    case ops::BININT:
      push(value::integer(
          static_cast<std::int32_t>(static_cast<std::uint32_t>(fixed(ops::BININT)))));
      break;
    case ops::BININT1:
      push(value::integer(static_cast<std::int64_t>(fixed(ops::BININT1))));
      break;
    case ops::BININT2:
      push(value::integer(static_cast<std::int64_t>(fixed(ops::BININT2))));
      break;
    case ops::LONG1:
      push(value::integer(long_bytes(length_of(ops::LONG1))));
      break;
    case ops::LONG4:
      push(value::integer(long_bytes(length_of(ops::LONG4))));
      break;
    case ops::BINFLOAT: {  // big-endian IEEE 754
      const auto s = fixed_bytes(ops::BINFLOAT);
      std::uint64_t u = 0;
      for (char c : s) u = (u << 8) | static_cast<unsigned char>(c);
      push(value::real(std::bit_cast<double>(u)));
      break;
    }
    case ops::UNICODE:
      push(value::str(raw_unicode(line(ops::of(ops::UNICODE).name))));
      break;
    case ops::SHORT_BINUNICODE:
      push(value::str(std::string(counted(ops::SHORT_BINUNICODE))));
      break;
    case ops::BINUNICODE:
      push(value::str(std::string(counted(ops::BINUNICODE))));
      break;
    case ops::BINUNICODE8:
      push(value::str(std::string(counted(ops::BINUNICODE8))));
      break;
    case ops::SHORT_BINBYTES:
      push(value::bytes(std::string(counted(ops::SHORT_BINBYTES))));
      break;
    case ops::BINBYTES:
      push(value::bytes(std::string(counted(ops::BINBYTES))));
      break;
    case ops::BINBYTES8:
      push(value::bytes(std::string(counted(ops::BINBYTES8))));
      break;
    case ops::MEMOIZE:
      put(memo_keys_.size());
      break;
    case ops::PUT:
      put(decimal(line(ops::of(ops::PUT).name), ops::of(ops::PUT).name));
      break;
    case ops::BINPUT:
      put(fixed(ops::BINPUT));
      break;
    case ops::LONG_BINPUT:
      put(fixed(ops::LONG_BINPUT));
      break;
    case ops::GET:
      get(decimal(line(ops::of(ops::GET).name), ops::of(ops::GET).name));
      break;
    case ops::BINGET:
      get(fixed(ops::BINGET));
      break;
    case ops::LONG_BINGET:
      get(fixed(ops::LONG_BINGET));
      break;
    default:
      fail(fmt::format("{} (only plain data is read: no classes, no calls)", opcode_name(op)),
           op_at_);
  }
}

namespace {
value read_from(cursor& in, const read_options& options, std::optional<std::uint64_t> size) {
  std::uint64_t scanned = 0;
  memo_uses uses = memo_uses::count(in, scanned);
  if (options.sink) options.sink->expect(uses.dicts());
  in.rewind();
  return reader(in, options, std::move(uses), size.value_or(scanned)).run();
}

/// read_from(), and again without the options should they not hold.
value read_twice_if_needed(cursor& in, const read_options& options,
                           std::optional<std::uint64_t> size) {
  if (options.opaque_keys.empty() && options.sink == nullptr) return read_from(in, options, size);
  try {
    return read_from(in, options, size);
  } catch (const reader::escaped&) {
    // A left-out value or taken items are needed after all: below.
  }
  if (options.sink) options.sink->clear();
  in.rewind();
  return read_from(in, read_options{options.limits, {}, nullptr}, size);
}
}  // namespace

value read(std::string_view bytes, read_limits limits) {
  return read(bytes, read_options{limits, {}, nullptr});
}

value read(std::string_view bytes, const read_options& options) {
  cursor in(bytes);
  return read_twice_if_needed(in, options, bytes.size());
}

value read(byte_source& source, const read_options& options) {
  source.rewind();
  cursor in(source);
  return read_twice_if_needed(in, options, source.size());
}

void check_start(std::string_view head) {
  cursor in(head);
  try {
    (void)reader(in, {}, memo_uses::all(), head.size(), true).run();
  } catch (const reader::end_of_prefix&) {
    // Plausible so far: the rest decides.
  } catch (const reader::escaped&) {
    // Not without options.
  }
}

}  // namespace gpu_basics::pickle

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
// never depends on them, beyond the value budget counting a left-out use as one value.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "pickle_detail.hpp"

namespace gpu_basics::pickle {

using detail::add_saturating;

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

/// The input as a window over its bytes: all of them (in memory), or a chunk of a byte_source,
/// refilled as reading moves on (the unread part kept, grown to what one opcode needs).
class cursor {
 public:
  explicit cursor(std::string_view all) : in_(all) {}
  explicit cursor(byte_source& src) : src_(&src), total_(src.size()) {}

  /// The offset of the next byte in the whole input.
  [[nodiscard]] std::uint64_t offset() const noexcept { return base_ + pos_; }
  /// Whether `n` more bytes can be read; when not, left() says how many the input has.
  [[nodiscard]] bool has(std::size_t n) { return n <= in_.size() - pos_ || refill(n); }
  [[nodiscard]] std::uint64_t left() const noexcept { return left_; }
  /// The next byte, or the next `n` (has() said they are there); a view valid until the next
  /// has(), line() or rest().
  unsigned char next() noexcept { return static_cast<unsigned char>(in_[pos_++]); }
  /// The bytes in view from here on (has() says how many), and a step over `n` of them.
  [[nodiscard]] const unsigned char* here() const noexcept {
    return reinterpret_cast<const unsigned char*>(in_.data()) + pos_;
  }
  void skip(std::size_t n) noexcept { pos_ += n; }
  [[nodiscard]] std::size_t ahead() const noexcept { return in_.size() - pos_; }
  /// The byte `k` places ahead (has(k + 1) said it is there), not taken.
  [[nodiscard]] unsigned char peek(std::size_t k = 0) const noexcept {
    return static_cast<unsigned char>(in_[pos_ + k]);
  }
  std::string_view take(std::size_t n) noexcept {
    const auto s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  /// The bytes up to the next '\n' (skipped), or nullopt when there is none.
  std::optional<std::string_view> line() {
    std::uint64_t from = offset();  // where the search goes on
    for (;;) {
      const auto nl = in_.find('\n', static_cast<std::size_t>(from - base_));
      if (nl != std::string_view::npos) {
        const auto s = in_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        return s;
      }
      from = base_ + in_.size();
      if (!refill(in_.size() - pos_ + 1)) return std::nullopt;
    }
  }
  /// The number of bytes from here to the end (the rest of a source is read).
  std::uint64_t rest() {
    std::uint64_t n = in_.size() - pos_;
    pos_ = in_.size();
    if (src_ && !end_) {
      buf_.resize(std::max(buf_.size(), kChunk));
      while (const std::size_t r = src_->read(buf_.data(), buf_.size())) n += r;
      end_ = true;
      in_ = {};
      pos_ = 0;
    }
    return n;
  }
  /// Keeps the bytes from here on in view until unpin(), so that reading can go back here.
  void pin() noexcept { pin_ = offset(); }
  void unpin() noexcept { pin_.reset(); }
  /// Back to the pin (which stays).
  void back_to_pin() noexcept { pos_ = static_cast<std::size_t>(*pin_ - base_); }
  /// The bytes at `offset` (from the pin on, in view), valid until the next has() or line().
  [[nodiscard]] std::string_view view(std::uint64_t offset, std::size_t n) const noexcept {
    return in_.substr(static_cast<std::size_t>(offset - base_), n);
  }
  /// How far reading is past the pin.
  [[nodiscard]] std::uint64_t past_pin() const noexcept { return offset() - *pin_; }

  /// Back to the first byte.
  void rewind() {
    pos_ = 0;
    pin_.reset();
    if (!src_) return;
    src_->rewind();
    in_ = {};
    base_ = 0;
    end_ = false;
  }

 private:
  static constexpr std::size_t kChunk = 256u << 10;

  bool refill(std::size_t n) {
    const std::size_t have = in_.size() - pos_;
    left_ = have;
    if (!src_ || end_) return false;
    if (total_ && *total_ >= offset() && n > *total_ - offset()) {  // past the size it said
      left_ = std::max<std::uint64_t>(have, *total_ - offset());
      return false;
    }
    // Bytes before the pin (or before pos_) are dropped; the rest move to the buffer's start.
    const std::size_t keep = pin_ ? static_cast<std::size_t>(*pin_ - base_) : pos_;
    const std::size_t kept = in_.size() - keep;
    const std::size_t need = pos_ - keep + n;
    if (buf_.size() < std::max(need, kChunk)) {
      std::string bigger(std::max(need, kChunk), '\0');
      std::memcpy(bigger.data(), in_.data() + keep, kept);
      buf_.swap(bigger);
    } else {
      std::memmove(buf_.data(), in_.data() + keep, kept);
    }
    base_ += keep;
    pos_ -= keep;
    std::size_t got = kept;
    while (got < need) {
      const std::size_t r = src_->read(buf_.data() + got, buf_.size() - got);
      if (r == 0) {
        end_ = true;
        break;
      }
      got += r;
    }
    in_ = std::string_view(buf_.data(), got);
    left_ = got - pos_;
    return got >= need;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::uint64_t base_ = 0;  // offset of in_[0]
  byte_source* src_ = nullptr;
  std::optional<std::uint64_t> total_;
  std::optional<std::uint64_t> pin_;
  std::string buf_;
  bool end_ = false;
  std::uint64_t left_ = 0;
};

/// How many uses (GET) of each memo key are ahead, counted by a first pass over the pickle; a
/// count that reaches 255 stays there (the value is kept to the end).
class memo_uses {
 public:
  /// Every key used to the end (no first pass).
  static memo_uses all() {
    memo_uses u;
    u.all_ = true;
    return u;
  }
  /// The first pass, from where `c` is: it stops at STOP, or at an opcode it cannot step over
  /// (which the second pass refuses, there or before). Returns the bytes it went over.
  static memo_uses count(cursor& c, std::uint64_t& bytes);
  /// The dicts (EMPTY_DICT, DICT) the first pass saw.
  [[nodiscard]] std::uint64_t dicts() const noexcept { return dicts_; }

  /// Whether a use of `key` is ahead.
  [[nodiscard]] bool ahead(std::uint64_t key) const {
    if (all_) return true;
    if (key < dense_.size()) return dense_[key] != 0;
    return sparse_.count(key) != 0;
  }
  /// One use of `key` done; returns whether another is ahead.
  bool use(std::uint64_t key) {
    if (all_) return true;
    if (key < dense_.size()) {
      auto& n = dense_[key];
      if (n != kSticky && n != 0) --n;
      return n != 0;
    }
    const auto it = sparse_.find(key);
    if (it == sparse_.end()) return false;
    if (it->second != kSticky && --it->second == 0) {
      sparse_.erase(it);
      return false;
    }
    return true;
  }

  /// Whether `key`'s value is kept to the end (its count no longer goes down).
  [[nodiscard]] bool sticky(std::uint64_t key) const {
    if (all_) return true;
    if (key < dense_.size()) return dense_[key] == kSticky;
    const auto it = sparse_.find(key);
    return it != sparse_.end() && it->second == kSticky;
  }
  /// Takes back a use().
  void undo(std::uint64_t key) {
    if (all_) return;
    if (key < dense_.size()) {
      if (dense_[key] != kSticky) ++dense_[key];
    } else if (auto& n = sparse_[key]; n != kSticky) {
      ++n;
    }
  }

 private:
  static constexpr std::uint8_t kSticky = 255;

  void add(std::uint64_t key, std::uint64_t puts) {
    // Keys of real pickles count up from 0 (PUT / MEMOIZE): a table; others go in a map.
    if (key < dense_.size() || key < 2 * puts + 1024) {
      if (key >= dense_.size()) dense_.resize(std::max<std::size_t>(key + 1, 2 * dense_.size()));
      if (dense_[key] != kSticky) ++dense_[key];
    } else if (auto& n = sparse_[key]; n != kSticky) {
      ++n;
    }
  }

  bool all_ = false;
  std::uint64_t dicts_ = 0;
  std::vector<std::uint8_t> dense_;
  std::unordered_map<std::uint64_t, std::uint8_t> sparse_;
};

memo_uses memo_uses::count(cursor& c, std::uint64_t& bytes) {
  memo_uses u;
  std::uint64_t puts = 0;  // PUT and MEMOIZE so far
  const auto u32 = [](const unsigned char* b) {
    return std::uint64_t{b[0]} | std::uint64_t{b[1]} << 8 | std::uint64_t{b[2]} << 16 |
           std::uint64_t{b[3]} << 24;
  };
  const auto skip = [&c](std::uint64_t n) {  // n bytes, when the input has them
    if (n > SIZE_MAX || !c.has(static_cast<std::size_t>(n))) return false;
    c.skip(static_cast<std::size_t>(n));
    return true;
  };
  const auto decimal = [](std::optional<std::string_view> s) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    if (!s) return std::nullopt;
    const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
    if (s->empty() || r.ec != std::errc{} || r.ptr != s->data() + s->size()) return std::nullopt;
    return v;
  };
  for (std::size_t ops = 0;; ++ops) {
    if ((ops & 0xffff) == 0) throw_if_interrupted();
    if (!c.has(9) && !c.has(1)) break;  // 9: the longest opcode of a fixed length
    const unsigned char* p = c.here();
    const std::size_t in_view = c.ahead();
    const auto fixed = [&](std::size_t n) {  // this opcode's n bytes, taken
      if (in_view < n) return false;
      c.skip(n);
      return true;
    };
    bool ok = true;
    switch (*p) {
      case 'h':  // BINGET
        if ((ok = fixed(2))) u.add(p[1], puts);
        break;
      case 'j':  // LONG_BINGET
        if ((ok = fixed(5))) u.add(u32(p + 1), puts);
        break;
      case 0x94:  // MEMOIZE
        ++puts;
        c.skip(1);
        break;
      case '}':
      case 'd':  // EMPTY_DICT, DICT
        ++u.dicts_;
        c.skip(1);
        break;
      case '(':
      case '0':
      case '1':
      case '2':
      case ']':
      case ')':
      case 'l':
      case 't':
      case 0x85:
      case 0x86:
      case 0x87:
      case 'a':
      case 'e':
      case 's':
      case 'u':
      case 'N':
      case 0x88:
      case 0x89:
        c.skip(1);
        break;
      case 'q':
      case 'r':  // BINPUT, LONG_BINPUT
        ++puts;
        ok = fixed(*p == 'q' ? 2 : 5);
        break;
      case 0x80:
      case 'K':  // PROTO, BININT1
        ok = fixed(2);
        break;
      case 'M':  // BININT2
        ok = fixed(3);
        break;
      case 'J':  // BININT
        ok = fixed(5);
        break;
      case 0x95:
      case 'G':  // FRAME, BINFLOAT
        ok = fixed(9);
        break;
      case 0x8a:
      case 0x8c:
      case 'C':  // LONG1, SHORT_BINUNICODE, SHORT_BINBYTES
        ok = in_view >= 2 && skip(2 + std::uint64_t{p[1]});
        break;
      case 0x8b:
      case 'X':
      case 'B':  // LONG4, BINUNICODE, BINBYTES
        ok = in_view >= 5 && skip(5 + u32(p + 1));
        break;
      case 0x8d:
      case 0x8e: {  // BINUNICODE8, BINBYTES8
        std::uint64_t n = 0;
        for (std::size_t i = 8; i >= 1 && in_view >= 9; --i) n = (n << 8) | p[i];
        ok = in_view >= 9 && n <= UINT64_MAX - 9 && skip(9 + n);
        break;
      }
      case 'I':
      case 'L':
      case 'F':
      case 'V':  // INT, LONG, FLOAT, UNICODE
        c.skip(1);
        ok = c.line().has_value();
        break;
      case 'p':  // PUT
        c.skip(1);
        ++puts;
        ok = decimal(c.line()).has_value();
        break;
      case 'g': {  // GET
        c.skip(1);
        const auto key = decimal(c.line());
        if ((ok = key.has_value())) u.add(*key, puts);
        break;
      }
      default:  // STOP, or an opcode the second pass refuses
        ok = false;
    }
    if (!ok) break;
  }
  bytes = c.offset();
  return u;
}

/// The keys the memo holds, as len(memo) counts them (MEMOIZE's key), whether or not their
/// values are kept.
class memo_keys {
 public:
  [[nodiscard]] std::uint64_t size() const noexcept { return dense_ + above_.size(); }
  /// Whether the keys are 0 .. size() - 1 (MEMOIZE's, as CPython writes them).
  [[nodiscard]] bool dense() const noexcept { return above_.empty(); }
  /// Back to the first `n` keys (dense()).
  void truncate(std::uint64_t n) noexcept { dense_ = n; }
  void add(std::uint64_t key) {
    if (key < dense_ || above_.count(key)) return;
    if (key != dense_) {
      above_.insert(key);
      return;
    }
    ++dense_;
    while (!above_.empty() && above_.erase(dense_)) ++dense_;
  }

 private:
  std::uint64_t dense_ = 0;  // 0 .. dense_ - 1 are all there
  std::unordered_set<std::uint64_t> above_;
};

/// The memo's values that have a use ahead (few at a time; one is looked up for every GET): an
/// open-addressing table of 32-byte slots, linear probing, removal by backward shift. The key
/// 2^64 - 1 marks a free slot; a value under that key (PUT can give it) is kept aside.
class memo_table {
 public:
  memo_table() : slots_(kFirst) {}

  [[nodiscard]] value* find(std::uint64_t key) {
    if (key == kFree) return last_ ? &*last_ : nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.key == key) return &s.v;
      if (s.key == kFree) return nullptr;
    }
  }
  void put(std::uint64_t key, const value& v) {
    if (key == kFree) {
      last_ = v;
      return;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(key, v);
  }
  /// Takes `key`'s value out (find() gave it).
  value take(std::uint64_t key) {
    if (key == kFree) {
      value out = std::move(*last_);
      last_.reset();
      return out;
    }
    std::size_t i = home(key);
    while (slots_[i].key != key) i = (i + 1) & mask_;
    value out = std::move(slots_[i].v);
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != kFree; j = (j + 1) & mask_) {
      // The entry at j moves back to i when i lies between its home and j.
      if (((j - home(slots_[j].key)) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = std::move(slots_[j]);
        i = j;
      }
    }
    slots_[i] = slot{};
    --size_;
    return out;
  }

 private:
  static constexpr std::uint64_t kFree = UINT64_MAX;
  struct slot {
    std::uint64_t key = kFree;
    value v;
  };
  static constexpr std::size_t kFirst = 64;

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void place(std::uint64_t key, const value& v) {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.key == kFree) {
        s = slot{key, v};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.v = v;
        return;
      }
    }
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (auto& s : old)
      if (s.key != kFree) place(s.key, s.v);
  }

  std::vector<slot> slots_;
  std::size_t mask_ = kFirst - 1;
  std::size_t size_ = 0;
  std::optional<value> last_;
};

}  // namespace

class reader {
 public:
  /// Thrown instead of a "truncated" error when reading a prefix (check_start()).
  struct end_of_prefix {};
  /// A left-out value or taken items would be needed: read again without the options.
  struct escaped {};

  /// `input_bytes` sizes the default value budget; `prefix`: check_start().
  reader(cursor& in, const read_options& options, memo_uses uses, std::uint64_t input_bytes,
         bool prefix = false)
      : in_(in),
        limits_(options.limits),
        opaque_(options.opaque_keys),
        sink_(options.sink),
        uses_(std::move(uses)),
        prefix_(prefix) {
    if (limits_.max_values == 0)
      limits_.max_values = std::max<std::uint64_t>(
          50'000'000, input_bytes > SIZE_MAX / 8 ? SIZE_MAX : input_bytes * 8);
  }

  value run() {
    for (;; ++ops_) {
      if ((ops_ & 0xffff) == 0) throw_if_interrupted();
      if (!in_.has(1)) truncated("truncated: the stream ends before STOP", in_.offset());
      op_at_ = in_.offset();
      const auto op = in_.next();
      if (op == '.') break;
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

 private:
  using seq_ptr = std::shared_ptr<value::seq_node>;
  using dict_ptr = std::shared_ptr<value::dict_node>;

  cursor& in_;
  read_limits limits_;
  const std::vector<std::string>& opaque_;
  item_sink* sink_;
  memo_uses uses_;
  bool prefix_ = false;
  std::uint64_t op_at_ = 0;
  std::uint64_t ops_ = 0;
  std::uint64_t made_ = 0;
  std::uint64_t lists_ = 0;                                       // list ids given to the sink
  std::vector<value::left_out_use> batch_;                        // left_out_batch()'s uses
  std::vector<flat_entry> flat_;                                  // flat_item()'s entries
  std::vector<std::pair<std::uint64_t, std::uint64_t>> flat_at_;  // where their strs are
  std::vector<value> stack_;
  std::vector<std::size_t> marks_;
  memo_table memo_;  // the values with a use ahead
  memo_keys memo_keys_;

  [[noreturn]] static void fail(const std::string& what, std::uint64_t at) {
    throw format_error(fmt::format("pickle: {} at offset {}", what, at));
  }

  [[noreturn]] void truncated(const std::string& what, std::uint64_t at) const {
    if (prefix_) throw end_of_prefix{};
    fail(what, at);
  }

  std::string_view take(std::uint64_t n, std::string_view what) {
    if (n > SIZE_MAX || !in_.has(static_cast<std::size_t>(n)))
      truncated(fmt::format("truncated: {} of {} bytes, {} left", what, n, in_.left()),
                in_.offset());
    return in_.take(static_cast<std::size_t>(n));
  }
  std::uint64_t le(std::size_t n, std::string_view what) {
    const auto s = take(n, what);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(s[i]);
    return v;
  }
  std::string_view line(std::string_view what) {
    const auto s = in_.line();
    if (!s) truncated(fmt::format("truncated: {} without its newline", what), in_.offset());
    return *s;
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

  // -- left-out values ----------------------------------------------------------------------
  static bool left_out(const value& v) {
    switch (v.d_.index()) {
      case 6:
        return std::get<seq_ptr>(v.d_)->left_out;
      case 7:
        return std::get<dict_ptr>(v.d_)->left_out;
      case 8:
        return true;
      default:
        return false;
    }
  }
  bool opaque_key(const value& k) const {
    const auto* s = std::get_if<value::str_data>(&k.d_);
    return s && std::find(opaque_.begin(), opaque_.end(), *s->s) != opaque_.end();
  }
  /// Whether a value placed at `at` on the stack is left out: inside the batch of a container
  /// that is (the one below the last MARK), or the value of an opaque key (at an odd place
  /// after the MARK, the key before it).
  bool leaves_out(std::size_t at) const {
    if (opaque_.empty() || marks_.empty()) return false;
    const std::size_t m = marks_.back();
    if (m > 0 && left_out(stack_[m - 1])) return true;
    return at > m && (at - m) % 2 == 1 && opaque_key(stack_[at - 1]);
  }
  /// An empty container of `kind` (list, tuple or dict), left out when `out`.
  static value container(value::type kind, bool out) {
    value c = kind == value::type::dict ? value::dict() : value::list();
    if (kind == value::type::tuple) std::get<seq_ptr>(c.d_)->tuple = true;
    if (out) set_left_out(c);
    return c;
  }
  static void set_left_out(value& c) {
    if (auto* n = std::get_if<seq_ptr>(&c.d_)) (*n)->left_out = true;
    if (auto* n = std::get_if<dict_ptr>(&c.d_)) (*n)->left_out = true;
  }
  /// A left-out container gains `v` (and key `k`): its height grows, nothing is kept.
  static void grow(value& c, const value& v, const value* k = nullptr) {
    const auto grown = [&](auto& n) {
      n.height = std::max(n.height, v.height() + 1);
      n.values = add_saturating(n.values, add_saturating(v.tree_values(), k ? 1 : 0));
    };
    if (auto* n = std::get_if<seq_ptr>(&c.d_)) grown(**n);
    if (auto* n = std::get_if<dict_ptr>(&c.d_)) grown(**n);
    if (auto* u = std::get_if<value::left_out_use>(&c.d_))
      u->height = std::max(u->height, v.height() + 1);
  }
  /// A use of `v` where it is left out: its height and type, not a copy.
  void push_use(const value& v) {
    count();
    value u;
    u.d_ = value::left_out_use{v.height(), v.kind()};
    stack_.push_back(std::move(u));
  }

  /// After a MARK above a left-out container (a trace entry's frames list): the uses (BINGET,
  /// LONG_BINGET) that follow and the APPENDS that ends them, taken as step() takes them (the
  /// same checks, counts and messages) but holding only their heights; at anything else the
  /// uses so far go on the stack and step() goes on.
  void left_out_batch() {
    batch_.clear();
    for (;; ++ops_) {
      if ((ops_ & 0xffff) == 0) throw_if_interrupted();
      const int op = peek_op();
      if (op < 0) break;
      if (op == 'e') {
        if (end_left_out_batch()) return;
        break;
      }
      const std::size_t n = op == 'h' ? 2 : op == 'j' ? 5 : 0;
      if (n == 0 || !in_.has(n)) break;
      std::uint64_t key = in_.peek(1);
      if (op == 'j')
        key |= std::uint64_t{in_.peek(2)} << 8 | std::uint64_t{in_.peek(3)} << 16 |
               std::uint64_t{in_.peek(4)} << 24;
      const value* v = memo_.find(key);
      if (!v) break;  // step() says so
      op_at_ = in_.offset();
      (void)in_.take(n);
      count();
      batch_.push_back({v->height(), v->kind()});
      if (!uses_.use(key)) (void)memo_.take(key);
    }
    for (const auto& u : batch_) {
      value x;
      x.d_ = u;
      stack_.push_back(std::move(x));
    }
  }
  /// The APPENDS of left_out_batch(), when its list is left out and open (else step() takes it).
  bool end_left_out_batch() {
    const auto* n = std::get_if<seq_ptr>(&stack_[marks_.back() - 1].d_);
    if (!n || (*n)->tuple || (*n)->sealed) return false;
    op_at_ = in_.offset();
    (void)in_.next();
    std::uint32_t height = 0;
    for (const auto& u : batch_) height = std::max(height, u.height);
    if (!batch_.empty() && height + 1 > limits_.max_depth)
      fail(fmt::format("nesting deeper than {}", limits_.max_depth), op_at_);
    value::seq_node& list = **n;
    if (!batch_.empty()) list.height = std::max(list.height, height + 1);
    list.values = add_saturating(list.values, batch_.size());
    marks_.pop_back();
    return true;
  }

  // -- a device trace's batch, read straight from the bytes --------------------------------
  /// Whether `v` is a list that the sink takes every item of so far (a device trace).
  bool taking(const value& v) const {
    const auto* n = std::get_if<seq_ptr>(&v.d_);
    return sink_ && n && !(*n)->left_out && !(*n)->tuple && !(*n)->sealed && (*n)->v.empty();
  }

  static constexpr std::uint64_t kMaxBatchBytes = std::uint64_t{64} << 20;

  /// What taking_batch() undoes should the batch not be what it reads.
  struct batch_undo {
    std::uint64_t made = 0;
    std::uint64_t memo_keys = 0;
    std::uint32_t height = 0;
    std::uint64_t values = 0;
    std::size_t taken = 0;               // items the sink took in this batch
    std::vector<std::uint64_t> used;     // memo keys used (uses_.use())
    std::vector<std::uint64_t> stored;   // memo keys given a value
    std::vector<std::uint64_t> retired;  // memo keys whose last use this was: dropped at the end
  };
  batch_undo undo_;

  /// After a MARK above a list that the sink is taking items of (a device trace): the batch of
  /// dicts that follows and its APPENDS, read straight from the bytes as long as each is a dict
  /// of str keys and scalars (containers under opaque keys left out, their items uses of
  /// memoised values), each offered to the sink as flat entries. The checks, counts and memo
  /// are step()'s, so the outcome is the same; at anything else (another opcode, a check that
  /// fails, the sink saying no, a batch of over 64Ki items or 64 MiB) all is put back as it was
  /// and step() reads the batch.
  void taking_batch() {
    if (!memo_keys_.dense()) return;
    value::seq_node& list = *std::get<seq_ptr>(stack_.back().d_);
    if (list.list_id == 0) list.list_id = ++lists_;
    batch_undo& u = undo_;
    u.used.clear();
    u.stored.clear();
    u.retired.clear();
    u.taken = 0;
    u.made = made_;
    u.memo_keys = memo_keys_.size();
    u.height = list.height;
    u.values = list.values;
    in_.pin();
    bool done = false;
    for (std::size_t n = 0; n < (std::size_t{1} << 16); ++n) {
      if ((++ops_ & 0xfff) == 0) throw_if_interrupted();
      const int op = peek_op();
      if (op < 0 || in_.past_pin() > kMaxBatchBytes) break;
      if (op == 'e') {
        (void)in_.next();
        done = true;
        break;
      }
      if (!flat_item(list, u)) break;
    }
    if (!done) {  // step() reads the batch from its MARK
      in_.back_to_pin();
      in_.unpin();
      made_ = u.made;
      memo_keys_.truncate(u.memo_keys);
      for (const auto k : u.used) uses_.undo(k);
      for (const auto k : u.stored) (void)memo_.take(k);
      list.height = u.height;
      list.values = u.values;
      list.taken -= u.taken;
      if (u.taken) sink_->untake(list.list_id, u.taken);
      return;
    }
    in_.unpin();
    for (const auto k : u.retired) (void)memo_.take(k);
    marks_.pop_back();
  }

  /// Counts `n` values as push() does; false past the budget.
  bool spend(std::uint64_t n) {
    made_ = add_saturating(made_, n);
    return made_ <= limits_.max_values;
  }
  /// A memoised value used (GET): nullptr when there is none.
  const value* use(std::uint64_t key, batch_undo& u) {
    const value* v = memo_.find(key);
    if (!v || uses_.sticky(key)) return v;
    u.used.push_back(key);
    if (!uses_.use(key)) u.retired.push_back(key);
    return v;
  }
  /// The next opcode, past any FRAME (taken, as step() takes it), not taken; -1 at the end.
  int peek_op() {
    for (;;) {
      if (!in_.has(1)) return -1;
      const unsigned char op = in_.peek();
      if (op != 0x95 || !in_.has(9)) return op;
      in_.skip(9);
    }
  }
  /// A BINGET / LONG_BINGET's key, taken; kNoKey for another opcode.
  static constexpr std::uint64_t kNoKey = UINT64_MAX;  // their keys have 32 bits
  std::uint64_t get_key() {
    const int op = peek_op();
    if (op == 'h' && in_.has(2)) {
      const unsigned char* p = in_.here();
      in_.skip(2);
      return p[1];
    }
    if (op == 'j' && in_.has(5)) {
      const unsigned char* p = in_.here();
      in_.skip(5);
      return std::uint64_t{p[1]} | std::uint64_t{p[2]} << 8 | std::uint64_t{p[3]} << 16 |
             std::uint64_t{p[4]} << 24;
    }
    return kNoKey;
  }
  /// The memo key of a MEMOIZE, BINPUT or LONG_BINPUT next (taken), when it is the next of the
  /// dense keys (as CPython numbers them); kNoKey when there is none; false for another PUT.
  bool memo_next(std::uint64_t& key) {
    key = kNoKey;
    const int op = peek_op();
    const std::size_t n = op == 0x94 ? 1 : op == 'q' ? 2 : op == 'r' ? 5 : 0;
    if (n == 0) return true;
    if (!in_.has(n)) return false;
    const unsigned char* p = in_.here();
    std::uint64_t k = memo_keys_.size();
    if (op == 'q') k = p[1];
    if (op == 'r')
      k = std::uint64_t{p[1]} | std::uint64_t{p[2]} << 8 | std::uint64_t{p[3]} << 16 |
          std::uint64_t{p[4]} << 24;
    if (k != memo_keys_.size()) return false;
    in_.skip(n);
    memo_keys_.add(k);
    key = k;
    return true;
  }
  /// A MEMOIZE (or BINPUT, LONG_BINPUT), if there is one, of a value nothing will use (else
  /// false: it would have to be kept).
  bool memoize_unused() {
    std::uint64_t key = kNoKey;
    return memo_next(key) && (key == kNoKey || !uses_.ahead(key));
  }
  /// A SHORT_BINUNICODE / BINUNICODE: where its bytes are (taken), or nullopt.
  std::optional<std::pair<std::uint64_t, std::size_t>> str_at() {
    const int op = peek_op();
    const std::size_t len_bytes = op == 0x8c ? 1 : op == 'X' ? 4 : 0;
    if (len_bytes == 0 || !in_.has(1 + len_bytes)) return std::nullopt;
    (void)in_.next();
    std::size_t n = 0;
    for (std::size_t i = 0; i < len_bytes; ++i) n |= std::size_t{in_.next()} << (8 * i);
    if (n > kMaxBatchBytes || !in_.has(n)) return std::nullopt;
    const std::uint64_t at = in_.offset();
    (void)in_.take(n);
    return std::pair{at, n};
  }

  /// One item of taking_batch(): a dict (EMPTY_DICT, MEMOIZE, MARK, keys and values, SETITEMS),
  /// offered to the sink and taken. False where step() must read it.
  bool flat_item(value::seq_node& list, batch_undo& u) {
    if (peek_op() != '}') return false;
    (void)in_.next();
    if (!spend(1) || !memoize_unused() || peek_op() != '(') return false;
    (void)in_.next();
    flat_.clear();
    flat_at_.clear();
    std::uint32_t height = 1;
    std::uint64_t values = 1;
    for (;;) {
      const int op = peek_op();
      if (op < 0) return false;
      if (op == 'u') {
        (void)in_.next();
        break;
      }
      flat_entry e;
      std::uint64_t key_at = 0, text_at = 0;  // where inline strs' bytes are (0: none)
      bool opaque = false;
      if (const auto key = get_key(); key != kNoKey) {  // a memoised str
        const value* k = use(key, u);
        const auto* str = k ? std::get_if<value::str_data>(&k->d_) : nullptr;
        if (!str || !spend(1)) return false;
        e.key = *str->s;
        opaque = opaque_key(*k);
      } else if (const auto at = str_at()) {
        const std::string_view text = in_.view(at->first, at->second);
        opaque = std::find(opaque_.begin(), opaque_.end(), text) != opaque_.end();
        if (!spend(1) || !memoize_unused()) return false;
        key_at = at->first;
        e.key = std::string_view(nullptr, at->second);
      } else {
        return false;
      }
      std::uint32_t h = 0;  // the value's height
      if (!flat_value(e, text_at, h, u, opaque) || h + 1 > limits_.max_depth) return false;
      height = std::max(height, h + 1);
      values = add_saturating(values, 2);
      flat_.push_back(e);
      flat_at_.emplace_back(key_at, text_at);
    }
    if (height + 1 > limits_.max_depth) return false;
    // Every byte of the dict is in view now: its strs' views.
    for (std::size_t i = 0; i < flat_.size(); ++i) {
      if (flat_at_[i].first) flat_[i].key = in_.view(flat_at_[i].first, flat_[i].key.size());
      if (flat_at_[i].second) flat_[i].text = in_.view(flat_at_[i].second, flat_[i].text.size());
    }
    if (!sink_->take(list.list_id, std::span<const flat_entry>(flat_))) return false;
    ++u.taken;
    ++list.taken;
    list.height = std::max(list.height, height + 1);
    list.values = add_saturating(list.values, values);
    return true;
  }

  /// The value of a flat_item() entry, into `e` (a str's bytes at `text_at`), its nesting height
  /// into `h`; `opaque`: under an opaque key. False where step() must read it.
  bool flat_value(flat_entry& e, std::uint64_t& text_at, std::uint32_t& h, batch_undo& u,
                  bool opaque) {
    const int op = peek_op();
    const auto fixed = [&](std::size_t n) -> std::optional<std::string_view> {
      if (!in_.has(1 + n)) return std::nullopt;
      (void)in_.next();
      return in_.take(n);
    };
    const auto integer = [&](std::optional<std::int64_t> i) {
      if (!i) return false;
      e.kind = value::type::integer;
      e.integer = *i;
      return spend(1);
    };
    switch (op) {
      case 'K':    // BININT1
      case 'M':    // BININT2
      case 'J': {  // BININT
        const auto b = fixed(op == 'K' ? 1 : op == 'M' ? 2 : 4);
        if (!b) return false;
        std::uint64_t v = 0;
        for (std::size_t i = b->size(); i-- > 0;)
          v = (v << 8) | static_cast<unsigned char>((*b)[i]);
        return integer(op == 'J' ? std::int64_t{static_cast<std::int32_t>(v)}
                                 : static_cast<std::int64_t>(v));
      }
      case 0x8a: {  // LONG1
        if (!in_.has(2) || in_.peek(1) > 8) return false;
        const auto b = fixed(1 + in_.peek(1));
        return b && integer(long_value(b->substr(1)));
      }
      case 'N':
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
        (void)in_.next();
        e.kind = op == 'N' ? value::type::none : value::type::boolean;
        e.integer = op == 0x88;
        return spend(1);
      case 'G': {  // BINFLOAT
        const auto b = fixed(8);
        if (!b) return false;
        std::uint64_t v = 0;
        for (char c : *b) v = (v << 8) | static_cast<unsigned char>(c);
        e.kind = value::type::real;
        e.real = std::bit_cast<double>(v);
        return spend(1);
      }
      case 0x8c:   // SHORT_BINUNICODE
      case 'X': {  // BINUNICODE
        const auto at = str_at();
        if (!at || !spend(1) || !memoize_unused()) return false;
        e.kind = value::type::str;
        text_at = at->first;
        e.text = std::string_view(nullptr, at->second);
        return true;
      }
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const auto key = get_key();
        const value* v = key != kNoKey ? use(key, u) : nullptr;
        if (!v) return false;
        if (opaque) {  // left out: None in the dict, its height kept
          h = v->height();
          return spend(1);
        }
        switch (v->d_.index()) {  // a scalar, as it is
          case 0:
            break;
          case 1:
            e.kind = value::type::boolean;
            e.integer = std::get<bool>(v->d_);
            break;
          case 2:
            e.kind = value::type::integer;
            e.integer = std::get<std::int64_t>(v->d_);
            break;
          case 3:
            e.kind = value::type::real;
            e.real = std::get<double>(v->d_);
            break;
          case 4:
            e.kind = value::type::str;
            e.text = *std::get<value::str_data>(v->d_).s;
            break;
          default:
            return false;
        }
        return spend(1);
      }
      case ']':  // EMPTY_LIST: under an opaque key, left out
        return opaque && left_out_list(h, u);
      default:
        return false;
    }
  }

  /// The run of BINGET / LONG_BINGET in view, each a left-out use of a list's batch (the most
  /// common opcodes of a snapshot: its frames), straight from the bytes; `height` and `values`
  /// are the list's. False where step() must read the batch.
  bool left_out_uses(std::uint32_t& height, std::uint64_t& values, batch_undo& u) {
    const unsigned char* const start = in_.here();
    const unsigned char* const end = start + in_.ahead();
    const unsigned char* p = start;
    std::uint64_t n = 0;
    while (end - p >= 5 && (*p == 'h' || *p == 'j')) {  // 5: LONG_BINGET's length
      const bool wide = *p == 'j';
      const std::uint64_t key = wide ? std::uint64_t{p[1]} | std::uint64_t{p[2]} << 8 |
                                           std::uint64_t{p[3]} << 16 | std::uint64_t{p[4]} << 24
                                     : p[1];
      const value* v = use(key, u);
      if (!v || v->height() + 1 > limits_.max_depth) return false;
      height = std::max(height, v->height() + 1);
      ++n;
      p += wide ? 5 : 2;
    }
    in_.skip(static_cast<std::size_t>(p - start));
    values = add_saturating(values, n);
    return spend(n);
  }

  /// A list under an opaque key in flat_item(): EMPTY_LIST, MEMOIZE, and its items (a batch of
  /// uses of memoised values, or one use and APPEND), as step() and left_out_batch() take them.
  bool left_out_list(std::uint32_t& height, batch_undo& u) {
    (void)in_.next();
    if (!spend(1)) return false;
    std::shared_ptr<value::seq_node> kept;  // the list, when the memo keeps it
    std::uint64_t memo_key = kNoKey;
    if (!memo_next(memo_key)) return false;
    if (memo_key != kNoKey && uses_.ahead(memo_key)) {
      value c = container(value::type::list, true);
      kept = std::get<seq_ptr>(c.d_);
      memo_.put(memo_key, c);
      u.stored.push_back(memo_key);
    }
    height = 1;
    std::uint64_t values = 1;
    if (const int op = peek_op(); op == '(') {  // a batch: each a use (left out)
      (void)in_.next();
      for (;;) {
        if (!left_out_uses(height, values, u)) return false;
        const int next = peek_op();
        if (next == 'e') {
          (void)in_.next();
          break;
        }
        if (next != 'h' && next != 'j') return false;
        const auto key = get_key();
        const value* v = key != kNoKey ? use(key, u) : nullptr;
        if (!v || !spend(1) || v->height() + 1 > limits_.max_depth) return false;
        height = std::max(height, v->height() + 1);
        values = add_saturating(values, 1);
      }
    } else if (op == 'h' || op == 'j') {  // one item: APPEND
      const auto key = get_key();
      const value* v = key != kNoKey ? use(key, u) : nullptr;
      if (!v || !spend(v->tree_values()) || v->height() + 1 > limits_.max_depth) return false;
      if (peek_op() != 'a') return false;
      (void)in_.next();
      seal(*v);
      height = v->height() + 1;
      values = add_saturating(values, v->tree_values());
    }
    if (kept) {
      kept->height = height;
      kept->values = values;
      kept->sealed = true;  // placed in the dict
    }
    return true;
  }

  // -- containers -----------------------------------------------------------------------------
  /// Marks `v` (a container) as shared or placed: it never changes again.
  static void seal(const value& v) {
    if (const auto* n = std::get_if<seq_ptr>(&v.d_)) (*n)->sealed = true;
    if (const auto* n = std::get_if<dict_ptr>(&v.d_)) (*n)->sealed = true;
  }
  /// Before `c` (a stack slot) changes: a sealed container is replaced by a shallow copy, open.
  void unshare(value& c) {
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
  void add_item(value& seq, value v, std::string_view op) {
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
  void add_entry(value& d, value k, value v, std::string_view op) {
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
  value sequence_from(std::size_t mark, bool tuple) {
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

  // -- the memo -------------------------------------------------------------------------------
  /// A second use of `v` (GET, DUP): shared, sealed, and counted at its size as a tree; only its
  /// height and type where it is left out.
  void push_shared(value v) {
    if (leaves_out(stack_.size())) {
      push_use(v);
      return;
    }
    count(v.tree_values());
    seal(v);
    stack_.push_back(std::move(v));
  }
  void put(std::uint64_t i) {
    value& v = top("PUT");
    memo_keys_.add(i);
    if (uses_.ahead(i)) memo_.put(i, v);
  }
  void get(std::uint64_t i) {
    const value* v = memo_.find(i);
    if (!v) fail(fmt::format("GET of memo {} that was never PUT", i), op_at_);
    if (uses_.use(i))
      push_shared(*v);
    else  // its last use
      push_shared(memo_.take(i));
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
    const auto v = long_value(take(n, "LONG"));
    if (!v) fail("an int beyond 64 bits", op_at_);
    return *v;
  }
  /// A little-endian two's-complement integer, or nullopt beyond 64 bits.
  static std::optional<std::int64_t> long_value(std::string_view s) {
    const std::size_t n = s.size();
    if (n == 0) return 0;
    const bool negative = (static_cast<unsigned char>(s[n - 1]) & 0x80) != 0;
    const unsigned char fill = negative ? 0xff : 0x00;
    for (std::size_t i = 8; i < n; ++i)
      if (static_cast<unsigned char>(s[i]) != fill) return std::nullopt;
    if (n > 8 && ((static_cast<unsigned char>(s[7]) & 0x80) != 0) != negative) return std::nullopt;
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
        if (!stack_.empty() && left_out(stack_.back()))
          left_out_batch();
        else if (!stack_.empty() && taking(stack_.back()))
          taking_batch();
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
        push(container(value::type::dict, leaves_out(stack_.size())));
        break;
      case ']':  // EMPTY_LIST
        push(container(value::type::list, leaves_out(stack_.size())));
        break;
      case ')':  // EMPTY_TUPLE
        push(container(value::type::tuple, leaves_out(stack_.size())));
        break;
      case 'd': {  // DICT
        const std::size_t m = pop_mark("DICT");
        if ((stack_.size() - m) % 2 != 0) fail("DICT with an odd number of items", op_at_);
        value d = container(value::type::dict, leaves_out(m));
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
        if (auto* n = std::get_if<dict_ptr>(&d.d_); n && !(*n)->sealed && !(*n)->left_out)
          (*n)->v.reserve((*n)->v.size() + (stack_.size() - m) / 2);
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
        put(memo_keys_.size());
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

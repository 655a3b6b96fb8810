// The pickle machine's second pass, which builds the value (pickle_read.cpp; the batches it reads
// straight from the bytes: pickle_read_batch.cpp), over a cursor (pickle_cursor.hpp), with the
// memo's uses counted by the first pass (pickle_first_pass.cpp) and opcodes as pickle_ops.hpp
// describes them. Private to the snapshot module.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "gpu_basics/snapshot/pickle.hpp"
#include "pickle_cursor.hpp"
#include "pickle_memo.hpp"
#include "pickle_ops.hpp"
#include "pickle_value.hpp"

namespace gpu_basics::pickle {

using detail::add_saturating;
using detail::cursor;
using detail::memo_keys;
using detail::memo_table;
using detail::memo_uses;

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

  value run();

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

  [[noreturn]] static void fail(const std::string& what, std::uint64_t at);

  [[noreturn]] void truncated(const std::string& what, std::uint64_t at) const;

  std::string_view take(std::uint64_t n, std::string_view what);
  std::uint64_t le(std::size_t n, std::string_view what);
  std::string_view line(std::string_view what);
  /// An opcode's operand, its width and name (in messages) as the opcode table gives them: a
  /// fixed operand as a little-endian number, or its bytes (BINFLOAT); a counted one's length
  /// (LONG1, LONG4: the int's bytes), or its bytes.
  std::uint64_t fixed(unsigned char op);
  std::string_view fixed_bytes(unsigned char op);
  std::uint64_t length_of(unsigned char op);
  std::string_view counted(unsigned char op);

  void count(std::uint64_t n = 1) {
    made_ = add_saturating(made_, n);
    if (made_ > limits_.max_values)
      fail(fmt::format("more than {} values", limits_.max_values), op_at_);
  }
  void push(value v);
  value pop(std::string_view op);
  value& top(std::string_view op);
  std::size_t pop_mark(std::string_view op);
  void check_depth(const value& child);

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
  bool leaves_out(std::size_t at) const;
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
  static void grow(value& c, const value& v, const value* k = nullptr);
  /// A use of `v` where it is left out: its height and type, not a copy.
  void push_use(const value& v);

  /// After a MARK above a left-out container (a trace entry's frames list): the uses (BINGET,
  /// LONG_BINGET) that follow and the APPENDS that ends them, taken as step() takes them (the
  /// same checks, counts and messages) but holding only their heights; at anything else the
  /// uses so far go on the stack and step() goes on.
  void left_out_batch();
  /// The APPENDS of left_out_batch(), when its list is left out and open (else step() takes it).
  bool end_left_out_batch();

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
  void taking_batch();

  /// Counts `n` values as push() does; false past the budget.
  bool spend(std::uint64_t n) {
    made_ = add_saturating(made_, n);
    return made_ <= limits_.max_values;
  }
  /// A memoised value used (GET): nullptr when there is none.
  const value* use(std::uint64_t key, batch_undo& u);
  /// The next opcode, past any FRAME (taken, as step() takes it), not taken; -1 at the end.
  int peek_op() {
    for (;;) {
      if (!in_.has(1)) return -1;
      const unsigned char op = in_.peek();
      if (op != ops::FRAME || !in_.has(ops::length(ops::FRAME))) return op;
      in_.skip(ops::length(ops::FRAME));
    }
  }
  /// A BINGET / LONG_BINGET's key, taken; kNoKey for another opcode.
  static constexpr std::uint64_t kNoKey = UINT64_MAX;  // their keys have 32 bits
  std::uint64_t get_key();
  /// The memo key of a MEMOIZE, BINPUT or LONG_BINPUT next (taken), when it is the next of the
  /// dense keys (as CPython numbers them); kNoKey when there is none; false for another PUT.
  bool memo_next(std::uint64_t& key);
  /// A MEMOIZE (or BINPUT, LONG_BINPUT), if there is one, of a value nothing will use (else
  /// false: it would have to be kept).
  bool memoize_unused();
  /// A SHORT_BINUNICODE / BINUNICODE: where its bytes are (taken), or nullopt.
  std::optional<std::pair<std::uint64_t, std::size_t>> str_at();

  /// One item of taking_batch(): a dict (EMPTY_DICT, MEMOIZE, MARK, keys and values, SETITEMS),
  /// offered to the sink and taken. False where step() must read it.
  bool flat_item(value::seq_node& list, batch_undo& u);

  /// The value of a flat_item() entry, into `e` (a str's bytes at `text_at`), its nesting height
  /// into `h`; `opaque`: under an opaque key. False where step() must read it.
  bool flat_value(flat_entry& e, std::uint64_t& text_at, std::uint32_t& h, batch_undo& u,
                  bool opaque);

  /// The run of BINGET / LONG_BINGET in view, each a left-out use of a list's batch (the most
  /// common opcodes of a snapshot: its frames), straight from the bytes; `height` and `values`
  /// are the list's. False where step() must read the batch.
  bool left_out_uses(std::uint32_t& height, std::uint64_t& values, batch_undo& u);

  /// A list under an opaque key in flat_item(): EMPTY_LIST, MEMOIZE, and its items (a batch of
  /// uses of memoised values, or one use and APPEND), as step() and left_out_batch() take them.
  bool left_out_list(std::uint32_t& height, batch_undo& u);

  // -- containers -----------------------------------------------------------------------------
  /// Marks `v` (a container) as shared or placed: it never changes again.
  static void seal(const value& v) {
    if (const auto* n = std::get_if<seq_ptr>(&v.d_)) (*n)->sealed = true;
    if (const auto* n = std::get_if<dict_ptr>(&v.d_)) (*n)->sealed = true;
  }
  /// Before `c` (a stack slot) changes: a sealed container is replaced by a shallow copy, open.
  void unshare(value& c);
  void add_item(value& seq, value v, std::string_view op);
  void add_entry(value& d, value k, value v, std::string_view op);
  value sequence_from(std::size_t mark, bool tuple);

  // -- the memo -------------------------------------------------------------------------------
  /// A second use of `v` (GET, DUP): shared, sealed, and counted at its size as a tree; only its
  /// height and type where it is left out.
  void push_shared(value v);
  void put(std::uint64_t i);
  void get(std::uint64_t i);
  std::uint64_t decimal(std::string_view s, std::string_view what);
  /// A little-endian two's-complement integer of `n` bytes, which must fit 64 bits.
  std::int64_t long_bytes(std::size_t n);
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
  static std::string raw_unicode(std::string_view s);

  void step(unsigned char op);
};

}  // namespace gpu_basics::pickle

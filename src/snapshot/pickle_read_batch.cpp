// The pickle reader's batches read straight from the bytes (most of a large snapshot): the uses
// of memoised values in a left-out list (a trace entry's frames), and a device trace's dicts of
// str keys and scalars, offered to the item sink as flat entries without being made values. Each
// takes operands as the opcode table (pickle_ops.hpp) gives them, with step()'s checks, counts and
// messages; at anything else it hands over to step() (pickle_read.cpp), as if it had not been.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "gpu_basics/core/interrupt.hpp"
#include "pickle_reader.hpp"

namespace gpu_basics::pickle {

void reader::left_out_batch() {
  batch_.clear();
  for (;; ++ops_) {
    if ((ops_ & 0xffff) == 0) throw_if_interrupted();
    const int op = peek_op();
    if (op < 0) break;
    if (op == ops::APPENDS) {
      if (end_left_out_batch()) return;
      break;
    }
    const std::size_t n = op == ops::BINGET        ? ops::length(ops::BINGET)
                          : op == ops::LONG_BINGET ? ops::length(ops::LONG_BINGET)
                                                   : 0;
    if (n == 0 || !in_.has(n)) break;
    const std::uint64_t key = op == ops::BINGET ? ops::fixed_le<ops::BINGET>(in_.here())
                                                : ops::fixed_le<ops::LONG_BINGET>(in_.here());
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

bool reader::end_left_out_batch() {
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

void reader::taking_batch() {
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
    if (op == ops::APPENDS) {
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

const value* reader::use(std::uint64_t key, batch_undo& u) {
  const value* v = memo_.find(key);
  if (!v || uses_.sticky(key)) return v;
  u.used.push_back(key);
  if (!uses_.use(key)) u.retired.push_back(key);
  return v;
}

std::uint64_t reader::get_key() {
  const int op = peek_op();
  if (op == ops::BINGET && in_.has(ops::length(ops::BINGET))) {
    const unsigned char* p = in_.here();
    in_.skip(ops::length(ops::BINGET));
    return ops::fixed_le<ops::BINGET>(p);
  }
  if (op == ops::LONG_BINGET && in_.has(ops::length(ops::LONG_BINGET))) {
    const unsigned char* p = in_.here();
    in_.skip(ops::length(ops::LONG_BINGET));
    return ops::fixed_le<ops::LONG_BINGET>(p);
  }
  return kNoKey;
}

bool reader::memo_next(std::uint64_t& key) {
  key = kNoKey;
  const int op = peek_op();
  const std::size_t n = op == ops::MEMOIZE       ? ops::length(ops::MEMOIZE)
                        : op == ops::BINPUT      ? ops::length(ops::BINPUT)
                        : op == ops::LONG_BINPUT ? ops::length(ops::LONG_BINPUT)
                                                 : 0;
  if (n == 0) return true;
  if (!in_.has(n)) return false;
  const unsigned char* p = in_.here();
  std::uint64_t k = memo_keys_.size();
  if (op == ops::BINPUT) k = ops::fixed_le<ops::BINPUT>(p);
  if (op == ops::LONG_BINPUT) k = ops::fixed_le<ops::LONG_BINPUT>(p);
  if (k != memo_keys_.size()) return false;
  in_.skip(n);
  memo_keys_.add(k);
  key = k;
  return true;
}

bool reader::memoize_unused() {
  std::uint64_t key = kNoKey;
  return memo_next(key) && (key == kNoKey || !uses_.ahead(key));
}

std::optional<std::pair<std::uint64_t, std::size_t>> reader::str_at() {
  const int op = peek_op();
  const std::size_t len_bytes = op == ops::SHORT_BINUNICODE ? ops::width(ops::SHORT_BINUNICODE)
                                : op == ops::BINUNICODE     ? ops::width(ops::BINUNICODE)
                                                            : 0;
  if (len_bytes == 0 || !in_.has(1 + len_bytes)) return std::nullopt;
  (void)in_.next();
  std::size_t n = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) n |= std::size_t{in_.next()} << (8 * i);
  if (n > kMaxBatchBytes || !in_.has(n)) return std::nullopt;
  const std::uint64_t at = in_.offset();
  (void)in_.take(n);
  return std::pair{at, n};
}

bool reader::flat_item(value::seq_node& list, batch_undo& u) {
  if (peek_op() != ops::EMPTY_DICT) return false;
  (void)in_.next();
  if (!spend(1) || !memoize_unused() || peek_op() != ops::MARK) return false;
  (void)in_.next();
  flat_.clear();
  flat_at_.clear();
  std::uint32_t height = 1;
  std::uint64_t values = 1;
  for (;;) {
    const int op = peek_op();
    if (op < 0) return false;
    if (op == ops::SETITEMS) {
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

bool reader::flat_value(flat_entry& e, std::uint64_t& text_at, std::uint32_t& h, batch_undo& u,
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
    case ops::BININT1:
    case ops::BININT2:
    case ops::BININT: {
      const auto b = fixed(ops::width(static_cast<unsigned char>(op)));
      if (!b) return false;
      std::uint64_t v = 0;
      for (std::size_t i = b->size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>((*b)[i]);
      return integer(op == ops::BININT ? std::int64_t{static_cast<std::int32_t>(v)}
                                       : static_cast<std::int64_t>(v));
    }
    case ops::LONG1: {  // at most 8 bytes: an int of 64 bits
      constexpr std::size_t w = ops::width(ops::LONG1);
      if (!in_.has(1 + w)) return false;
      const std::uint64_t n = ops::le(in_.here() + 1, w);
      if (n > 8) return false;
      const auto b = fixed(w + static_cast<std::size_t>(n));
      return b && integer(long_value(b->substr(w)));
    }
    case ops::NONE:
    case ops::NEWTRUE:
    case ops::NEWFALSE:
      (void)in_.next();
      e.kind = op == ops::NONE ? value::type::none : value::type::boolean;
      e.integer = op == ops::NEWTRUE;
      return spend(1);
    case ops::BINFLOAT: {  // big-endian
      const auto b = fixed(ops::width(ops::BINFLOAT));
      if (!b) return false;
      std::uint64_t v = 0;
      for (char c : *b) v = (v << 8) | static_cast<unsigned char>(c);
      e.kind = value::type::real;
      e.real = std::bit_cast<double>(v);
      return spend(1);
    }
    case ops::SHORT_BINUNICODE:
    case ops::BINUNICODE: {
      const auto at = str_at();
      if (!at || !spend(1) || !memoize_unused()) return false;
      e.kind = value::type::str;
      text_at = at->first;
      e.text = std::string_view(nullptr, at->second);
      return true;
    }
    case ops::BINGET:
    case ops::LONG_BINGET: {
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
    case ops::EMPTY_LIST:  // under an opaque key, left out
      return opaque && left_out_list(h, u);
    default:
      return false;
  }
}

bool reader::left_out_uses(std::uint32_t& height, std::uint64_t& values, batch_undo& u) {
  const unsigned char* const start = in_.here();
  const unsigned char* const end = start + in_.ahead();
  const unsigned char* p = start;
  std::uint64_t n = 0;
  constexpr std::size_t narrow = ops::length(ops::BINGET), broad = ops::length(ops::LONG_BINGET);
  static_assert(narrow <= broad);
  while (end - p >= static_cast<std::ptrdiff_t>(broad) &&
         (*p == ops::BINGET || *p == ops::LONG_BINGET)) {
    const bool wide = *p == ops::LONG_BINGET;
    const std::uint64_t key =
        wide ? ops::fixed_le<ops::LONG_BINGET>(p) : ops::fixed_le<ops::BINGET>(p);
    const value* v = use(key, u);
    if (!v || v->height() + 1 > limits_.max_depth) return false;
    height = std::max(height, v->height() + 1);
    ++n;
    p += wide ? broad : narrow;
  }
  in_.skip(static_cast<std::size_t>(p - start));
  values = add_saturating(values, n);
  return spend(n);
}

bool reader::left_out_list(std::uint32_t& height, batch_undo& u) {
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
  if (const int op = peek_op(); op == ops::MARK) {  // a batch: each a use (left out)
    (void)in_.next();
    for (;;) {
      if (!left_out_uses(height, values, u)) return false;
      const int next = peek_op();
      if (next == ops::APPENDS) {
        (void)in_.next();
        break;
      }
      if (next != ops::BINGET && next != ops::LONG_BINGET) return false;
      const auto key = get_key();
      const value* v = key != kNoKey ? use(key, u) : nullptr;
      if (!v || !spend(1) || v->height() + 1 > limits_.max_depth) return false;
      height = std::max(height, v->height() + 1);
      values = add_saturating(values, 1);
    }
  } else if (op == ops::BINGET || op == ops::LONG_BINGET) {  // one item: APPEND
    const auto key = get_key();
    const value* v = key != kNoKey ? use(key, u) : nullptr;
    if (!v || !spend(v->tree_size()) || v->height() + 1 > limits_.max_depth) return false;
    if (peek_op() != ops::APPEND) return false;
    (void)in_.next();
    seal(*v);
    height = v->height() + 1;
    values = add_saturating(values, v->tree_size());
  }
  if (kept) {
    kept->height = height;
    kept->values = values;
    kept->sealed = true;  // placed in the dict
  }
  return true;
}

}  // namespace gpu_basics::pickle

// The first pass over a pickle: it steps over each opcode by its operand as the opcode table
// (pickle_ops.hpp) gives it, counting the uses (GET) of each memo key and the dicts made, so that
// the second pass (pickle_read.cpp) keeps a memoised value only while a use of it is ahead.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

#include "gpu_basics/core/interrupt.hpp"
#include "pickle_memo.hpp"
#include "pickle_ops.hpp"

namespace gpu_basics::pickle::detail {

namespace {
/// PUT's and GET's key, or nullopt when the line is missing or is not a number.
std::optional<std::uint64_t> decimal(std::optional<std::string_view> s) {
  std::uint64_t v = 0;
  if (!s) return std::nullopt;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (s->empty() || r.ec != std::errc{} || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

/// The longest opcode with a fixed operand (FRAME, BINFLOAT: 9 bytes).
constexpr std::size_t longest_fixed() {
  std::size_t n = 1;
  for (const auto& o : ops::kTable) n = std::max(n, o.length());
  return n;
}
static_assert(longest_fixed() == 9);
}  // namespace

memo_uses memo_uses::count(cursor& c, std::uint64_t& bytes) {
  memo_uses u;
  std::uint64_t puts = 0;                    // PUT and MEMOIZE so far
  const auto skip = [&c](std::uint64_t n) {  // n bytes, when the input has them
    if (n > SIZE_MAX || !c.has(static_cast<std::size_t>(n))) return false;
    c.skip(static_cast<std::size_t>(n));
    return true;
  };
  for (std::size_t n_ops = 0;; ++n_ops) {
    if ((n_ops & 0xffff) == 0) throw_if_interrupted();
    if (!c.has(longest_fixed()) && !c.has(1)) break;
    const unsigned char* p = c.here();
    const std::size_t in_view = c.ahead();
    const ops::info& op = ops::of(*p);
    // STOP, or an opcode the second pass refuses: the end of this pass.
    if (!op.taken() || op.code == ops::STOP) break;
    std::optional<std::uint64_t> key;  // a memo key given inline (BINPUT, BINGET, ...)
    bool ok = true;
    switch (op.arg) {
      case ops::operand::none:
        c.skip(1);
        break;
      case ops::operand::fixed:
        if ((ok = in_view >= op.length())) {
          if (op.kind == ops::family::memo_get) key = ops::le(p + 1, op.width);
          c.skip(op.length());
        }
        break;
      case ops::operand::counted: {
        const std::size_t head = 1 + op.width;
        const std::uint64_t n = in_view >= head ? ops::le(p + 1, op.width) : 0;
        ok = in_view >= head && n <= UINT64_MAX - head && skip(head + n);
        break;
      }
      case ops::operand::line: {
        c.skip(1);
        const auto s = c.line();
        if (op.kind == ops::family::memo_put || op.kind == ops::family::memo_get) {
          key = decimal(s);  // PUT, GET: a number
          ok = key.has_value();
        } else {
          ok = s.has_value();
        }
        break;
      }
    }
    if (!ok) break;
    if (op.kind == ops::family::memo_put) ++puts;
    if (op.kind == ops::family::memo_get) u.add(*key, puts);
    if (op.code == ops::EMPTY_DICT || op.code == ops::DICT) ++u.dicts_;
  }
  bytes = c.offset();
  return u;
}

}  // namespace gpu_basics::pickle::detail

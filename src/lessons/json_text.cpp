#include "json_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"

namespace gpu_basics::lessons::detail {

namespace {

using nlohmann::json;

/// A recursive-descent parser writing straight into the tree. The stack of open containers
/// (an array's index, an object's current key) is the key path of any error.
class parser {
 public:
  parser(std::string_view text, const std::string& source, const json_text_limits& limits)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        source_(source),
        limits_(limits) {
    stack_.reserve(static_cast<std::size_t>(limits.max_depth) + 1);
  }

  json parse() {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;  // a byte order mark
    json out;
    skip_space();
    value(out);
    skip_space();
    if (p_ != end_) syntax("more after the value");
    return out;
  }

 private:
  struct frame {
    bool array;
    std::size_t index;
    const std::string* key;  // the member being read; null while its key is
  };

  // ---- errors -------------------------------------------------------------------------------

  [[nodiscard]] std::string path() const {
    std::string out;
    for (const auto& f : stack_) {
      if (f.array)
        out += "[" + std::to_string(f.index) + "]";
      else if (f.key)
        out += (out.empty() ? "" : ".") + json_path_error::key_text(*f.key);
    }
    return out.empty() ? "the top level" : out;
  }

  /// "got 'x'", or "got the end of the text".
  [[nodiscard]] std::string got() const {
    if (p_ >= end_) return "got the end of the text";
    return "got " + quote_for_message(std::string_view(p_, 1));
  }

  [[noreturn]] void syntax(const std::string& what) const {
    std::size_t line = 1;
    const char* line_start = begin_;
    for (const char* c = begin_; c < p_ && c < end_; ++c)
      if (*c == '\n') {
        ++line;
        line_start = c + 1;
      }
    throw format_error(fmt::format("{}: not JSON at line {}, column {} ({}): {}",
                                   printable(source_), line, p_ - line_start + 1, path(), what));
  }

  [[noreturn]] void refuse(const std::string& what) const {
    throw format_error(printable(source_) + ": " + path() + ": " + what);
  }

  // ---- values -------------------------------------------------------------------------------

  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  void value(json& out) {
    if (++values_ % 65536 == 0) throw_if_interrupted();  // Ctrl-C in a large file
    if (p_ >= end_) syntax("expected a value, " + got());
    switch (*p_) {
      case '{':
        object(out);
        return;
      case '[':
        array(out);
        return;
      case '"': {
        std::string s;
        string(s);
        if (s.size() > limits_.max_string) refuse(too_long("string", s.size()));
        out = std::move(s);
        return;
      }
      case 't':
        literal("true");
        out = true;
        return;
      case 'f':
        literal("false");
        out = false;
        return;
      case 'n':
        literal("null");
        out = nullptr;
        return;
      default:
        number(out);
    }
  }

  [[nodiscard]] std::string too_long(const char* what, std::size_t bytes) const {
    return fmt::format("a {} of {} bytes; at most {} KiB", what, bytes, limits_.max_string / 1024);
  }

  void literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      syntax("expected a value, " + got());
    p_ += word.size();
  }

  /// Enters an array or object at its opening bracket; false when it is empty (and already left).
  bool open(bool array) {
    if (stack_.size() + 1 > static_cast<std::size_t>(limits_.max_depth))
      refuse(fmt::format("nested more than {} levels deep", limits_.max_depth));
    stack_.push_back({array, 0, nullptr});
    ++p_;
    skip_space();
    return more(array ? ']' : '}', nullptr);
  }

  /// After an element or member (`after`; null right after the opening bracket): true when
  /// another follows, false at the closing bracket `close` (the container is left).
  bool more(char close, const char* after) {
    if (after) {
      skip_space();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_space();
        return true;
      }
    }
    if (p_ < end_ && *p_ == close) {
      ++p_;
      stack_.pop_back();
      return false;
    }
    if (!after) return true;
    syntax(fmt::format("expected ',' or '{}' after {}, {}", close, after, got()));
  }

  void object(json& out) {
    out = json::object();
    auto& members = *out.get_ptr<json::object_t*>();
    for (bool next = open(false); next; next = more('}', "a member")) {
      stack_.back().key = nullptr;
      if (p_ >= end_ || *p_ != '"') syntax("expected a key in double quotes, " + got());
      std::string key;
      string(key);
      if (key.size() > limits_.max_string) refuse(too_long("key", key.size()));
      skip_space();
      if (p_ >= end_ || *p_ != ':') syntax("expected ':' after a key, " + got());
      ++p_;
      skip_space();
      // Files keep their keys sorted: the hint makes each insertion constant time. A repeated
      // key keeps its last value.
      const auto it = members.emplace_hint(members.end(), std::move(key), nullptr);
      it->second = nullptr;
      stack_.back().key = &it->first;
      value(it->second);
    }
  }

  void array(json& out) {
    out = json::array();
    auto& elements = *out.get_ptr<json::array_t*>();
    for (bool next = open(true); next; next = more(']', "an element")) {
      stack_.back().index = elements.size();
      elements.emplace_back();
      value(elements.back());
    }
  }

  // ---- numbers ------------------------------------------------------------------------------

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  void digits() {
    if (p_ >= end_ || !digit(*p_)) syntax("expected a digit, " + got());
    while (p_ < end_ && digit(*p_)) ++p_;
  }

  void number(json& out) {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ < end_ && *p_ == '0')
      ++p_;
    else if (p_ < end_ && digit(*p_))
      digits();
    else
      syntax("expected a value, " + got());
    bool whole = true;
    if (p_ < end_ && *p_ == '.') {
      whole = false;
      ++p_;
      digits();
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      whole = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      digits();
    }
    if (whole) {  // as nlohmann: unsigned when not negative, signed when negative, else double
      if (negative) {
        std::int64_t v = 0;
        if (std::from_chars(start, p_, v).ec == std::errc()) {
          out = v;
          return;
        }
      } else {
        std::uint64_t v = 0;
        if (std::from_chars(start, p_, v).ec == std::errc()) {
          out = v;
          return;
        }
      }
    }
    double d = 0;
    const auto r = std::from_chars(start, p_, d);
    if (r.ec == std::errc::result_out_of_range) {
      // Beyond a double's range, or below its smallest: strtod tells which (and rounds the
      // latter to a subnormal or zero, as nlohmann does).
      d = std::strtod(std::string(start, p_).c_str(), nullptr);
      if (!std::isfinite(d)) {
        p_ = start;
        refuse("a number outside the range of a double");
      }
    } else if (r.ec != std::errc() || r.ptr != p_) {
      p_ = start;
      syntax("not a number");
    }
    out = d;
  }

  // ---- strings ------------------------------------------------------------------------------

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /// The four hex digits after "\u".
  unsigned code_unit() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = p_ < end_ ? hex(*p_) : -1;
      if (h < 0) syntax("expected four hex digits after \\u, " + got());
      v = v * 16 + static_cast<unsigned>(h);
      ++p_;
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  void escape(std::string& out) {
    ++p_;  // the backslash
    if (p_ >= end_) syntax("a string without its closing quote");
    const char c = *p_++;
    switch (c) {
      case '"':
      case '\\':
      case '/':
        out += c;
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u':
        break;
      default:
        --p_;
        syntax("not an escape of JSON: \\" + printable(std::string_view(p_, 1)));
    }
    unsigned cp = code_unit();
    if (cp >= 0xDC00 && cp <= 0xDFFF) syntax("a low surrogate \\u escape without its high one");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
        syntax("a high surrogate \\u escape without its low one");
      p_ += 2;
      const unsigned low = code_unit();
      if (low < 0xDC00 || low > 0xDFFF) syntax("a high surrogate \\u escape without its low one");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  /// One UTF-8 sequence of two to four bytes (RFC 3629: no overlong forms, no surrogates,
  /// nothing past U+10FFFF), appended as it is.
  void utf8(std::string& out) {
    const auto b = [&](std::ptrdiff_t i) {
      return p_ + i < end_ ? static_cast<unsigned char>(p_[i]) : 0u;
    };
    const unsigned c = b(0);
    const auto cont = [&](std::ptrdiff_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
      return b(i) >= lo && b(i) <= hi;
    };
    std::ptrdiff_t n = 0;
    if (c >= 0xC2 && c <= 0xDF)
      n = cont(1) ? 2 : 0;
    else if (c == 0xE0)
      n = cont(1, 0xA0) && cont(2) ? 3 : 0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      n = cont(1) && cont(2) ? 3 : 0;
    else if (c == 0xED)
      n = cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    else if (c == 0xF0)
      n = cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    else if (c >= 0xF1 && c <= 0xF3)
      n = cont(1) && cont(2) && cont(3) ? 4 : 0;
    else if (c == 0xF4)
      n = cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    if (n == 0) syntax("a string that is not UTF-8");
    out.append(p_, static_cast<std::size_t>(n));
    p_ += n;
  }

  void string(std::string& out) {
    ++p_;  // the opening quote
    for (;;) {
      const char* run = p_;
      while (p_ < end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++p_;
      }
      out.append(run, p_);
      if (p_ >= end_) syntax("a string without its closing quote");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return;
      }
      if (c == '\\')
        escape(out);
      else if (c < 0x20)
        syntax("a control character in a string (JSON writes it as \\u" + fmt::format("{:04x}", c) +
               ")");
      else
        utf8(out);
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& source_;
  json_text_limits limits_;
  std::vector<frame> stack_;
  std::size_t values_ = 0;
};

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& source,
                               const json_text_limits& limits) {
  return parser(text, source, limits).parse();
}

}  // namespace gpu_basics::lessons::detail

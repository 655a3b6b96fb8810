#include "gpu_basics/core/errors.hpp"

#include <csignal>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace gpu_basics {

namespace {

/// Bytes of the UTF-8 sequence starting at `s[i]` when it is valid and printable (not a C1
/// control), else 0.
std::size_t printable_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead >= 0x20 && lead < 0x7f) return 1;
  std::size_t n = 0;
  if (lead >= 0xc2 && lead <= 0xdf)
    n = 2;
  else if (lead >= 0xe0 && lead <= 0xef)
    n = 3;
  else if (lead >= 0xf0 && lead <= 0xf4)
    n = 4;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  if (lead == 0xc2 && byte(i + 1) < 0xa0) return 0;  // U+0080..U+009F: C1 controls
  if (lead == 0xe0 && byte(i + 1) < 0xa0) return 0;  // overlong
  if (lead == 0xf0 && byte(i + 1) < 0x90) return 0;  // overlong
  if (lead == 0xf4 && byte(i + 1) > 0x8f) return 0;  // above U+10FFFF
  if (lead == 0xed && byte(i + 1) > 0x9f) return 0;  // surrogates
  return n;
}

/// How append_escaped() treats quotes and backslashes, and newlines.
struct escaping {
  bool quotes = true;     // '"' and '\\' escaped
  bool newlines = false;  // '\n' kept as it is
};

/// Appends `s` escaped, at most `max_chars` characters of it; returns the characters in `s`.
std::size_t append_escaped(std::string& out, std::string_view s, std::size_t max_chars,
                           escaping how = {}) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); ++chars) {
    const std::size_t n = printable_sequence(s, i);
    const char c = s[i];
    if (chars < max_chars) {
      if (how.quotes && (c == '"' || c == '\\'))
        out += {'\\', c};
      else if (n > 0)
        out.append(s.substr(i, n));
      else if (how.newlines && c == '\n')
        out += c;
      else if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
    i += n > 0 ? n : 1;
  }
  return chars;
}

std::string format_config_message(const std::string& source, int line, int column,
                                  const std::string& key, const std::string& message) {
  std::string where = printable(source);
  if (line > 0)
    where += column > 0 ? fmt::format(":{}:{}", line, column) : fmt::format(":{}", line);
  return key.empty() ? fmt::format("{}: {}", where, message)
                     : fmt::format("{}: {}: {}", where, printable(key), message);
}
}  // namespace

config_error::config_error(std::string source, int line, int column, std::string key,
                           std::string message)
    : error(format_config_message(source, line, column, key, message)),
      source_(std::move(source)),
      line_(line),
      column_(column),
      key_(std::move(key)),
      detail_(std::move(message)) {}

interrupted::interrupted(int signal_number)
    : error(signal_number == SIGTERM ? "interrupted (SIGTERM)" : "interrupted (SIGINT)"),
      signal_number_(signal_number) {}

std::string quote_for_message(std::string_view text, std::size_t max_chars) {
  std::string out = "\"";
  const std::size_t chars = append_escaped(out, text, max_chars);
  out += '"';
  if (chars > max_chars) out += fmt::format("... ({} characters)", chars);
  return out;
}

std::string printable(std::string_view text) {
  std::string out;
  (void)append_escaped(out, text, std::numeric_limits<std::size_t>::max());
  return out;
}

json_path_error::json_path_error(std::string detail)
    : format_error(detail), detail_(std::move(detail)), what_(detail_) {}

std::string json_path_error::key_text(std::string_view key) {
  constexpr std::size_t kMaxKeyChars = 64;
  if (key.empty()) return "\"\"";
  std::string k;
  if (append_escaped(k, key, kMaxKeyChars) > kMaxKeyChars) k += "...";
  return k;
}

void json_path_error::prepend_key(std::string_view key) {
  prepend_path(key_text(key));
}

void json_path_error::prepend_index(std::size_t index) {
  prepend_path(fmt::format("[{}]", index));
}

void json_path_error::prepend_path(std::string_view path) {
  if (path.empty()) return;
  if (path_.empty() || path_.front() == '[')
    path_.insert(0, path);
  else
    path_.insert(0, std::string(path) + ".");
  update();
}

void json_path_error::update() {
  what_ = path_.empty() ? detail_ : path_ + ": " + detail_;
}

std::string message_line(std::string_view text, std::size_t max_chars) {
  std::string out;
  const std::size_t chars = append_escaped(out, text, max_chars, {.quotes = false});
  if (chars > max_chars) out += fmt::format("... ({} more characters)", chars - max_chars);
  return out;
}

std::string terminal_text(std::string_view text) {
  std::string out;
  (void)append_escaped(out, text, std::numeric_limits<std::size_t>::max(),
                       {.quotes = false, .newlines = true});
  return out;
}

cuda_error::cuda_error(int code, std::string name, const std::string& description,
                       const std::string& call, const char* file, int line)
    : error(fmt::format("{} failed: {} ({}): {} at {}:{}", call, name, code, description, file,
                        line)),
      code_(code),
      name_(std::move(name)) {}

nccl_error::nccl_error(int code, const std::string& description, const std::string& call,
                       const char* file, int line)
    : error(fmt::format("{} failed: NCCL error {} ({}) at {}:{}", call, code, description, file,
                        line)),
      code_(code) {}

}  // namespace gpu_basics

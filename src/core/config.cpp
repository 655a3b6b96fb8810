#include "gpu_basics/core/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "config_detail.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

// ---- enums -------------------------------------------------------------------------------------

std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::float64:
    case dtype::int64:
      return 8;
    case dtype::float32:
    case dtype::int32:
      return 4;
    case dtype::float16:
    case dtype::bfloat16:
      return 2;
    case dtype::int8:
    case dtype::uint8:
      return 1;
  }
  return 1;
}

namespace {
constexpr std::pair<dtype, std::string_view> kDtypeNames[] = {
    {dtype::float32, "float32"}, {dtype::float16, "float16"}, {dtype::bfloat16, "bfloat16"},
    {dtype::float64, "float64"}, {dtype::int8, "int8"},       {dtype::uint8, "uint8"},
    {dtype::int32, "int32"},     {dtype::int64, "int64"}};
constexpr std::pair<log_level, std::string_view> kLevelNames[] = {{log_level::trace, "trace"},
                                                                  {log_level::debug, "debug"},
                                                                  {log_level::info, "info"},
                                                                  {log_level::warn, "warn"},
                                                                  {log_level::error, "error"}};
constexpr std::pair<store_mode, std::string_view> kStoreModeNames[] = {
    {store_mode::off, "off"},
    {store_mode::uploads, "uploads"},
    {store_mode::downloads, "downloads"},
    {store_mode::both, "both"}};
}  // namespace

namespace detail {
std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}
}  // namespace detail
using detail::lower;

std::string config::memory_section::allocator_section::effective_conf() const {
  std::string s = to_conf_string(effective());
  std::vector<conf_entry> rest;  // other modules' keys, the last of each
  for (const conf_entry& e : check_allocator_conf(conf)) {
    allocator_policy scratch;
    const auto k = find_allocator_key(e.key);
    if (!k || k->ignored || apply_policy_key(scratch, e.key, e.value)) continue;
    std::erase_if(rest, [&e](const conf_entry& r) { return r.key == e.key; });
    rest.push_back(e);
  }
  for (const conf_entry& e : rest)
    s.append(s.empty() ? "" : ",").append(e.key).append(":").append(e.value);
  return s;
}

std::string_view to_string(dtype t) noexcept {
  for (const auto& [v, n] : kDtypeNames)
    if (v == t) return n;
  return "?";
}

std::string_view to_string(log_level l) noexcept {
  for (const auto& [v, n] : kLevelNames)
    if (v == l) return n;
  return "?";
}

std::optional<dtype> parse_dtype(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [v, s] : kDtypeNames)
    if (s == n) return v;
  if (n == "fp32" || n == "float") return dtype::float32;
  if (n == "fp16" || n == "half") return dtype::float16;
  if (n == "bf16") return dtype::bfloat16;
  if (n == "fp64" || n == "double") return dtype::float64;
  return std::nullopt;
}

std::string_view to_string(store_mode m) noexcept {
  for (const auto& [v, n] : kStoreModeNames)
    if (v == m) return n;
  return "?";
}

std::optional<store_mode> parse_store_mode(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [v, s] : kStoreModeNames)
    if (s == n) return v;
  if (n == "true") return store_mode::both;
  if (n == "false") return store_mode::off;
  return std::nullopt;
}

void to_json(nlohmann::json& j, store_mode m) {
  j = std::string(to_string(m));
}

void from_json(const nlohmann::json& j, store_mode& m) {
  if (j.is_boolean()) {
    m = j.get<bool>() ? store_mode::both : store_mode::off;
    return;
  }
  const auto parsed =
      j.is_string() ? parse_store_mode(j.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed) throw json_type_error("off, uploads, downloads or both", j);
  m = *parsed;
}

std::optional<log_level> parse_log_level(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [v, s] : kLevelNames)
    if (s == n) return v;
  if (n == "warning") return log_level::warn;
  return std::nullopt;
}

std::optional<std::uint64_t> shape_bytes(const tensor_shape& s, dtype t) noexcept {
  if (s.dims.empty()) return std::nullopt;
  std::uint64_t bytes = dtype_size(t);
  for (std::int64_t d : s.dims) {
    if (d <= 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

namespace {

struct byte_unit {
  std::string_view name;  // as echo_byte_size() writes it; read in any case
  std::uint64_t bytes;
};
constexpr byte_unit kByteUnits[] = {{"B", 1},
                                    {"KiB", 1ull << 10},
                                    {"MiB", 1ull << 20},
                                    {"GiB", 1ull << 30},
                                    {"TiB", 1ull << 40},
                                    {"kB", 1000ull},
                                    {"MB", 1000ull * 1000},
                                    {"GB", 1000ull * 1000 * 1000},
                                    {"TB", 1000ull * 1000 * 1000 * 1000}};

/// A byte size as written: digits, an optional point and digits, spaces, a unit (none: bytes).
struct written_size {
  std::string_view number;          // as written: "8.8"
  std::string_view whole;           // "8"
  std::string_view fraction;        // "8" (empty without a point)
  const byte_unit* unit = nullptr;  // null when none was written
};

/// `text` split as written_size, or nullopt when it is not one: no digits, a point not followed
/// by a digit, a sign, an exponent, an unknown unit, more than 19 digits after the point.
std::optional<written_size> split_byte_size(std::string_view text) {
  written_size w;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  w.whole = text.substr(0, i);
  if (i < text.size() && text[i] == '.') {
    const std::size_t from = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    w.fraction = text.substr(from, i - from);
    if (w.fraction.empty() || w.fraction.size() > 19) return std::nullopt;
  }
  if (w.whole.empty() && w.fraction.empty()) return std::nullopt;
  w.number = text.substr(0, i);
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = lower(text.substr(i));
  if (unit.empty()) return w;
  for (const auto& u : kByteUnits)
    if (unit == lower(u.name)) {
      w.unit = &u;
      return w;
    }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  const auto w = split_byte_size(text);
  if (!w) return std::nullopt;
  __extension__ using wide = unsigned __int128;  // exact: up to 2^64 * 2^40
  const std::uint64_t scale = w->unit ? w->unit->bytes : 1;
  std::uint64_t whole = 0;
  if (!w->whole.empty()) {
    const auto r = std::from_chars(w->whole.data(), w->whole.data() + w->whole.size(), whole);
    if (r.ec != std::errc{}) return std::nullopt;  // beyond 64 bits
  }
  // The fraction exactly, in integers: fraction digits f of n places are f * scale / 10^n bytes,
  // rounded to the nearest (a half up). Bytes themselves have no fraction to round.
  std::uint64_t f = 0, places = 1;
  for (const char c : w->fraction) {
    f = f * 10 + static_cast<std::uint64_t>(c - '0');
    places *= 10;
  }
  if (scale == 1 && f != 0) return std::nullopt;
  const wide part = static_cast<wide>(f) * scale;
  wide bytes = static_cast<wide>(whole) * scale + part / places;
  if (2 * (part % places) >= places) ++bytes;
  if (bytes > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

std::optional<std::string> echo_byte_size(std::string_view text) {
  if (!parse_byte_size(text)) return std::nullopt;
  const auto w = split_byte_size(text);
  return std::string(w->number) + " " + std::string(w->unit ? w->unit->name : "B");
}

std::string to_string(const tensor_shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s.dims[i]);
  }
  return out + "]";
}

// ---- parsing helpers -------------------------------------------------------------------------

namespace detail {

source_location location_of(const std::string& source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return {source, 0, 0};
  return {source, m.line + 1, m.column + 1};
}

/// The context of `node`, a part of ctx's value named `key`. A node written before its key came
/// through an alias: its mark is the anchor's, so the error points at the key and names the
/// anchor's line instead.
parse_context part_of(const parse_context& ctx, std::string key, const YAML::Node& node) {
  parse_context part{ctx.source, std::move(key), location_of(ctx.source, node), ctx.key_pos,
                     ctx.alias};
  if (ctx.key_pos >= 0 && node.Mark().pos >= 0 && node.Mark().pos < ctx.key_pos) {
    part.alias = " (through an alias of line " + std::to_string(part.where.line) + ")";
    part.where = ctx.where;
  }
  return part;
}

[[noreturn]] void fail(const parse_context& ctx, const std::string& message) {
  throw config_error(ctx.where.source, ctx.where.line, ctx.where.column, ctx.key,
                     message + ctx.alias);
}

[[noreturn]] void fail_at(const source_location& where, const std::string& key,
                          const std::string& message) {
  throw config_error(where.source, where.line, where.column, key, message);
}

/// How a node reads in an error message: `"four"`, `100`, `a list`, `a mapping`, `nothing`.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& s = node.Scalar();
  double d = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  if (!s.empty() && s.size() <= 32 && r.ec == std::errc{} && r.ptr == s.data() + s.size()) return s;
  return quote_for_message(s);
}

std::optional<std::int64_t> scalar_int(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& s = node.Scalar();
  std::int64_t v = 0;
  const char* begin = s.data();
  if (s.size() > 1 && s[0] == '+' && std::isdigit(static_cast<unsigned char>(s[1]))) ++begin;
  const auto r = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

int read_int(const YAML::Node& node, const parse_context& ctx, std::string_view expectation) {
  const auto v = scalar_int(node);
  if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return static_cast<int>(*v);
}

std::uint64_t read_size(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation) {
  const auto v = node.IsScalar() ? parse_byte_size(node.Scalar()) : std::nullopt;
  if (!v) fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return *v;
}

bool read_bool(const YAML::Node& node, const parse_context& ctx) {
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    fail(ctx, "expected true or false, got " + describe(node));
  return b;
}

std::string read_string(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation) {
  if (!node.IsScalar())
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return node.Scalar();
}

}  // namespace detail

namespace {

using namespace detail;

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Fails unless `name` is a plain key a file may hold: short, and not dotted (a dotted key
/// would be a second way to set a nested key, and could set it twice).
void check_key_name(const std::string& name, const std::string& prefix,
                    const source_location& where) {
  if (name.size() > config_limits::key_chars)
    fail_at(where, prefix,
            "a key of " + std::to_string(name.size()) + " characters, " +
                quote_for_message(name, 24) + "; a key name is at most " +
                std::to_string(config_limits::key_chars));
  if (const auto dot = name.find('.'); dot != std::string::npos)
    fail_at(where, prefix.empty() ? name : prefix + "." + name,
            "a dotted key; in a file, nest it: '" + name.substr(0, dot) + ":' with '" +
                name.substr(dot + 1) + ": ...' indented under it (dotted keys are for --set)");
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(" \t") - first + 1));
}

/// yaml-cpp's terse parser messages in a user's words; others are kept as they are.
std::string yaml_message(const std::string& msg) {
  static const std::pair<std::string_view, std::string_view> words[] = {
      {YAML::ErrorMsg::MAP_VALUE,
       "a ':' where no value can start: a key longer than 1024 characters, or a second "
       "'key: value' on one line?"},
      {YAML::ErrorMsg::MAP_KEY, "a '?' where no key can start"},
      {YAML::ErrorMsg::END_OF_MAP, "a mapping that is not closed or not indented evenly"},
      {YAML::ErrorMsg::END_OF_MAP_FLOW, "a '{' without its '}'"},
      {YAML::ErrorMsg::END_OF_SEQ, "a list that is not indented evenly"},
      {YAML::ErrorMsg::END_OF_SEQ_FLOW, "a '[' without its ']'"},
      {YAML::ErrorMsg::FLOW_END, "a ']' or '}' without its opening bracket"},
      {YAML::ErrorMsg::BLOCK_ENTRY, "a '- ' list item where a key or value was expected"},
      {YAML::ErrorMsg::TAB_IN_INDENTATION, "a tab in the indentation (indent with spaces)"},
      {YAML::ErrorMsg::EOF_IN_SCALAR, "a quoted value that is never closed"},
      {YAML::ErrorMsg::UNKNOWN_ANCHOR, "an alias (*name) whose anchor (&name) is not defined"},
      {YAML::ErrorMsg::UNKNOWN_TOKEN, "a character YAML does not allow here"},
  };
  for (const auto& [terse, plain] : words)
    if (msg == terse) return std::string(plain);
  return msg;
}

/// Counts the documents a parser finds; keeps where the second one starts.
struct document_counter : YAML::EventHandler {
  int documents = 0;
  YAML::Mark second_start;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

/// Control characters other than tab, newline and carriage return: never YAML text.
bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t' && c != '\n' && c != '\r') || u == 0x7f;
}

}  // namespace

namespace detail {

/// Parses `text` as exactly one YAML document (none: a null node). `key` names the --set key.
YAML::Node load_document(std::string_view text, const std::string& source, const std::string& key) {
  if (text.size() > config_limits::file_bytes)
    throw config_error(source, 0, 0, key,
                       "the text is " + std::to_string(text.size()) + " bytes; at most " +
                           std::to_string(config_limits::file_bytes / 1024) + " KiB (" +
                           std::to_string(config_limits::file_bytes) + " bytes) is read");
  const bool from_file = key.empty();
  const std::string what =
      from_file ? "invalid YAML: " : "invalid YAML value " + quote_for_message(text) + ": ";
  const auto at = [&](const YAML::Mark& m, const std::string& message) {
    return from_file && m.line >= 0 ? config_error(source, m.line + 1, m.column + 1, key, message)
                                    : config_error(source, 0, 0, key, message);
  };
  if (const auto bad = std::find_if(text.begin(), text.end(), is_control); bad != text.end()) {
    const auto offset = static_cast<std::size_t>(bad - text.begin());
    const auto line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
    const int line = static_cast<int>(std::count(text.begin(), bad, '\n')) + 1;
    const int column = static_cast<int>(
        line_start == std::string_view::npos || offset == 0 ? offset + 1 : offset - line_start);
    throw config_error(source, from_file ? line : 0, from_file ? column : 0, key,
                       "a control character (" + printable(std::string(1, *bad)) +
                           ") in the text; a configuration is YAML text (escape it in a quoted "
                           "string)");
  }
  YAML::Node document;
  try {
    // At most two documents are parsed: yaml-cpp can find endless empty documents in some
    // malformed input, and YAML::LoadAll would collect them until memory runs out.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    document_counter counter;
    if (parser.HandleNextDocument(counter) && parser.HandleNextDocument(counter))
      throw at(counter.second_start,
               "a second YAML document (after '---' or '...'); a configuration is one document");
    document = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    throw at(e.mark, what + "nested more than " + std::to_string(config_limits::yaml_depth) +
                         " levels deep");
  } catch (const YAML::ParserException& e) {
    throw at(e.mark, what + yaml_message(e.msg));
  } catch (const YAML::Exception& e) {
    throw at(e.mark, what + yaml_message(e.msg));
  }
  return document;
}

std::string unknown_key_message(const config_schema& schema, const std::string& key) {
  std::string msg = "unknown key";
  if (const auto near = schema.nearest_key(key)) return msg + "; did you mean '" + *near + "'?";
  std::string all;
  for (const auto& k : schema.keys()) all += (all.empty() ? "" : ", ") + k.name();
  return msg + "; known keys: " + all;
}

void walk_map(const config_schema& schema, config& cfg, const YAML::Node& map,
              const std::string& prefix, const std::string& source) {
  std::map<std::string, int> seen;  // key -> line first given
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const source_location key_loc = location_of(source, key_node);
    if (!key_node.IsScalar()) fail_at(key_loc, prefix, "expected a plain key name");
    const std::string& name = key_node.Scalar();
    check_key_name(name, prefix, key_loc);
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (const auto [pos, inserted] = seen.emplace(name, key_loc.line); !inserted)
      fail_at(key_loc, full,
              "duplicate key (first given at line " + std::to_string(pos->second) + ")");
    if (value.IsScalar() && value.Scalar().size() > config_limits::value_chars)
      fail_at(location_of(source, value), full,
              "a value of " + std::to_string(value.Scalar().size()) + " characters, " +
                  quote_for_message(value.Scalar(), 24) + "; a value is at most " +
                  std::to_string(config_limits::value_chars));

    if (const config_key* spec = schema.find(full)) {
      const parse_context key_ctx{source, full, key_loc, key_node.Mark().pos, ""};
      const parse_context value_ctx = value.IsNull() ? key_ctx : part_of(key_ctx, full, value);
      spec->impl().read(cfg, value, value_ctx);
      cfg.origins[full] = value_ctx.where;
    } else if (schema.is_section(full)) {
      if (value.IsNull()) continue;  // an empty section keeps its defaults
      if (!value.IsMap())
        fail_at(location_of(source, value), full,
                "expected a mapping of " + full + ".* keys, got " + describe(value));
      walk_map(schema, cfg, value, full, source);
    } else {
      fail_at(key_loc, full, unknown_key_message(schema, full));
    }
  }
}

}  // namespace detail

// ---- public API ----------------------------------------------------------------------------

std::vector<std::string> known_config_keys() {
  std::vector<std::string> keys;
  for (const auto& k : config_schema::builtin().keys()) keys.push_back(k.name());
  return keys;
}

std::optional<std::string> nearest_config_key(std::string_view key) {
  return config_schema::builtin().nearest_key(key);
}

std::optional<std::string> config_schema::nearest_key(std::string_view key) const {
  // No known key is near a long name; and the search costs length x length.
  if (key.size() > 2 * config_limits::key_chars) return std::nullopt;
  const auto leaf = [](std::string_view k) {
    const auto p = k.rfind('.');
    return p == std::string_view::npos ? k : k.substr(p + 1);
  };
  // Candidates: every key and every section name ("transfer").
  std::vector<std::string> candidates;
  for (const auto& k : keys_) {
    const std::string& name = k.name();
    candidates.push_back(name);
    for (auto p = name.find('.'); p != std::string::npos; p = name.find('.', p + 1))
      candidates.push_back(name.substr(0, p));
  }
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    // Whole names, and leaf names: a right name in the wrong section still finds its key.
    const std::size_t d = std::min(edit_distance(key, c), edit_distance(leaf(key), leaf(c)));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, leaf(key).size() / 3);
  if (best_d <= limit && best && *best != key) return best;
  return std::nullopt;
}

std::optional<std::string> nearest_word(std::string_view word,
                                        const std::vector<std::string>& names) {
  if (word.size() > 2 * config_limits::key_chars) return std::nullopt;
  const std::string w = lower(word);
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& n : names) {
    const std::size_t d = edit_distance(w, lower(n));
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  if (best && best_d <= std::max<std::size_t>(2, word.size() / 3) && *best != word) return best;
  return std::nullopt;
}

std::string read_config_file(const std::string& path) {
  const auto refuse = [&](const std::string& why) { return config_error(path, 0, 0, "", why); };
  // O_NONBLOCK: opening a FIFO with no writer must not wait; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw refuse("cannot read the configuration file (" + std::string(std::strerror(errno)) + ")");
  const struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw refuse("cannot read the configuration file (" + std::string(std::strerror(errno)) + ")");
  if (S_ISDIR(st.st_mode)) throw refuse("is a directory, not a configuration file");
  if (!S_ISREG(st.st_mode))
    throw refuse("is not a regular file (a device, FIFO or socket); give a YAML file");
  const auto too_big = [&](std::uint64_t bytes) {
    return refuse("the configuration file is " + std::to_string(bytes) + " bytes; at most " +
                  std::to_string(config_limits::file_bytes / 1024) + " KiB (" +
                  std::to_string(config_limits::file_bytes) + " bytes) is read");
  };
  if (static_cast<std::uint64_t>(st.st_size) > config_limits::file_bytes) throw too_big(st.st_size);
  std::string text(config_limits::file_bytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw refuse("error while reading the configuration file (" +
                   std::string(std::strerror(errno)) + ")");
    }
    got += static_cast<std::size_t>(n);
  }
  if (got > config_limits::file_bytes) throw too_big(got);  // it grew while read
  text.resize(got);
  return text;
}

config parse_config(std::string_view text, std::string_view source_name, const config& base) {
  return config_schema::builtin().parse(text, source_name, base);
}

config config_schema::parse(std::string_view text, std::string_view source_name,
                            const config& base) const {
  const std::string source(source_name);
  const YAML::Node root = load_document(text, source, "");
  config cfg = base;
  if (root.IsNull()) return cfg;  // an empty file: every default
  if (!root.IsMap())
    throw config_error(source, location_of(source, root).line, location_of(source, root).column, "",
                       "expected a mapping of keys at the top level, got " + describe(root));
  try {
    walk_map(*this, cfg, root, "", source);
  } catch (const YAML::Exception& e) {
    throw config_error(source, e.mark.line + 1, e.mark.column + 1, "",
                       std::string("invalid YAML: ") + e.what());
  }
  return cfg;
}

void apply_override(config& cfg, std::string_view assignment) {
  config_schema::builtin().apply_override(cfg, assignment);
}

void config_schema::apply_override(config& cfg, std::string_view assignment) const {
  const std::string source = "--set";
  const auto eq = assignment.find('=');
  const std::string key(eq == std::string_view::npos ? "" : trim(assignment.substr(0, eq)));
  if (key.empty())
    throw config_error(source, 0, 0, "",
                       "expected key=value, got " + quote_for_message(assignment));
  const std::string value(assignment.substr(eq + 1));
  if (key.size() > 2 * config_limits::key_chars)
    throw config_error(source, 0, 0, "",
                       "a key of " + std::to_string(key.size()) + " characters, " +
                           quote_for_message(key, 24) + "; no key is that long");
  if (key.find_first_of(" \t\r\n") != std::string::npos)
    throw config_error(
        source, 0, 0, "",
        "a key with a space in it: " + quote_for_message(key) + "; expected key=value");
  const config_key* spec = find(key);
  if (!spec) {
    if (is_section(key))
      throw config_error(
          source, 0, 0, key, "is a section; set one of its keys, e.g. " + [&] {
            for (const auto& k : keys_)
              if (k.name().rfind(key + ".", 0) == 0) return k.name();
            return std::string();
          }() + "=...");
    throw config_error(source, 0, 0, key, unknown_key_message(*this, key));
  }
  const YAML::Node node = load_document(value, source, key);
  const source_location where{source, 0, 0};
  spec->impl().read(cfg, node, parse_context{source, key, where, -1, ""});
  // List items keep their origin keys; point them at --set too.
  for (auto& [k, loc] : cfg.origins)
    if (k.rfind(key + "[", 0) == 0) loc = where;
  cfg.origins[key] = where;
}

config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  config cfg = path.empty() ? parse_config(default_config_text(), "<built-in default>")
                            : parse_config(read_config_file(path), path);
  for (const auto& o : overrides) apply_override(cfg, o);
  validate(cfg);
  return cfg;
}

}  // namespace gpu_basics

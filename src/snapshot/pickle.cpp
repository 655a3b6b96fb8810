// Python values as the pickle reader (pickle_read.cpp) makes them, and the writer.
#include "gpu_basics/snapshot/pickle.hpp"

#include <algorithm>
#include <bit>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "pickle_value.hpp"

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
using detail::add_saturating;

value value::list(items it) {
  value v;
  auto n = std::make_shared<seq_node>();
  for (const auto& e : it) {
    n->height = std::max(n->height, e.height() + 1);
    n->values = add_saturating(n->values, e.tree_size());
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
    n->values = add_saturating(n->values, add_saturating(k.tree_size(), x.tree_size()));
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
    case 7:
      return type::dict;
    default:
      return std::get<8>(d_).kind;  // left_out_use: read() never returns one
  }
}

std::string_view value::type_name(type t) noexcept {
  switch (t) {
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
[[noreturn]] void wrong_type(std::string_view got, std::string_view want) {
  throw logic_error(fmt::format("pickle value: expected {}, got {}", want, got));
}
}  // namespace

bool value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&d_)) return *b;
  wrong_type(type_name(), "bool");
}
std::int64_t value::as_int() const {
  if (const auto* i = std::get_if<std::int64_t>(&d_)) return *i;
  wrong_type(type_name(), "int");
}
double value::as_real() const {
  if (const auto* d = std::get_if<double>(&d_)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&d_)) return static_cast<double>(*i);
  wrong_type(type_name(), "float");
}
const std::string& value::as_str() const {
  if (const auto* s = std::get_if<str_data>(&d_)) return *s->s;
  if (const auto* b = std::get_if<bytes_data>(&d_)) return *b->s;
  wrong_type(type_name(), "str");
}
const items& value::as_items() const {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->v;
  wrong_type(type_name(), "list");
}
const entries& value::as_entries() const {
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->v;
  wrong_type(type_name(), "dict");
}

bool flat_entry::as_bool() const {
  if (kind == value::type::boolean) return integer != 0;
  wrong_type(type_name(), "bool");
}
std::int64_t flat_entry::as_int() const {
  if (kind == value::type::integer) return integer;
  wrong_type(type_name(), "int");
}
std::string_view flat_entry::as_str() const {
  if (kind == value::type::str) return text;
  wrong_type(type_name(), "str");
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
  if (!n) wrong_type(type_name(), "list");
  (*n)->height = std::max((*n)->height, v.height() + 1);
  (*n)->values = add_saturating((*n)->values, v.tree_size());
  (*n)->v.push_back(std::move(v));
}
void value::set(value key, value v) {
  auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_);
  if (!n) wrong_type(type_name(), "dict");
  (*n)->height = std::max((*n)->height, v.height() + 1);
  (*n)->values = add_saturating((*n)->values, add_saturating(key.tree_size(), v.tree_size()));
  (*n)->v.emplace_back(std::move(key), std::move(v));
}

std::uint64_t value::tree_values() const noexcept {
  return tree_size();
}

std::size_t value::taken() const noexcept {
  const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_);
  return n ? (*n)->taken : 0;
}

std::uint64_t value::list_id() const noexcept {
  const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_);
  return n ? (*n)->list_id : 0;
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

// JSON for the library's data types: std::optional as "null or the value" (nlohmann_json before
// 3.12 has no such serializer); a reader that converts a value to its type and, when it cannot,
// says where and why (json_path_error: "shapes[0].copies[3].seconds: expected a number, got
// null"); and the macro that gives a plain struct lossless to_json/from_json through that reader,
// where a key missing from older files takes the member's default. Host-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"

#if !defined(NLOHMANN_JSON_VERSION_MAJOR) || \
    (NLOHMANN_JSON_VERSION_MAJOR == 3 && NLOHMANN_JSON_VERSION_MINOR < 12)
namespace nlohmann {
template <class T>
struct adl_serializer<std::optional<T>> {
  /// null for an empty optional, else the value.
  static void to_json(json& j, const std::optional<T>& v) {
    if (v)
      j = *v;
    else
      j = nullptr;
  }
  /// An empty optional from null, else the value.
  /// @throws nlohmann::json::exception when the value is not a T.
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null())
      v.reset();
    else
      v = j.get<T>();
  }
};
}  // namespace nlohmann
#endif

namespace gpu_basics {

/// `j` as a message shows it: null, true, 2.5, "text" (cut), an object, a list.
[[nodiscard]] std::string json_kind(const nlohmann::json& j);

/// The json_path_error for a value that is not the `expected` kind ("a number").
[[nodiscard]] json_path_error json_type_error(const char* expected, const nlohmann::json& j);

/// nlohmann's exception as a json_path_error: its message without the exception's id.
[[nodiscard]] json_path_error json_path_error_of(const nlohmann::json::exception& e);

/// The json_path_error unless `j` is an object.
void require_json_object(const nlohmann::json& j);

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

/// An integer of `j`, whole and within T's range.
template <class T>
T integer_of(const nlohmann::json& j) {
  using limits = std::numeric_limits<T>;
  const auto range = [&] {
    return json_path_error("expected an integer in " + std::to_string(limits::min()) + ".." +
                           std::to_string(limits::max()) + ", got " + json_kind(j));
  };
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(limits::max())) throw range();
    return static_cast<T>(v);
  }
  if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (v < static_cast<std::int64_t>(limits::min()) ||
        (v > 0 && static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(limits::max())))
      throw range();
    return static_cast<T>(v);
  }
  if (j.is_number_float()) {  // a whole number written as a float ("20.0")
    const double d = j.get<double>();
    if (std::trunc(d) != d) throw json_type_error("an integer", j);
    if (!(d >= static_cast<double>(limits::min()) && d < std::ldexp(1.0, limits::digits)))
      throw range();
    return static_cast<T>(d);
  }
  throw json_type_error("an integer", j);
}
}  // namespace detail

/// Reads `j` into `out`: bools, integers (whole and in range), floating point (any number),
/// strings, std::optional (null: empty), std::vector (a list, element by element), and any other
/// type through its from_json.
/// @throws json_path_error naming the path below `j` of the first value that cannot be read.
template <class T>
void read_json(const nlohmann::json& j, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) throw json_type_error("true or false", j);
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    out = detail::integer_of<T>(j);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) throw json_type_error("a number", j);
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) throw json_type_error("a string", j);
    out = j.get_ref<const std::string&>();
  } else if constexpr (detail::is_optional<T>::value) {
    if (j.is_null()) {
      out.reset();
    } else {
      typename T::value_type v{};
      read_json(j, v);
      out = std::move(v);
    }
  } else if constexpr (detail::is_vector<T>::value) {
    if (!j.is_array()) throw json_type_error("a list", j);
    out.clear();
    out.reserve(j.size());
    std::size_t i = 0;
    for (const auto& e : j) {
      typename T::value_type v{};
      try {
        read_json(e, v);
      } catch (json_path_error& err) {
        err.prepend_index(i);
        throw;
      }
      out.push_back(std::move(v));
      ++i;
    }
  } else if constexpr (std::is_same_v<T, nlohmann::json>) {
    out = j;
  } else {
    try {
      j.get_to(out);  // the type's from_json
    } catch (const json_path_error&) {
      throw;
    } catch (const nlohmann::json::exception& e) {
      throw json_path_error_of(e);
    }
  }
}

/// `j[key]` into `out` when `j` (an object) has the key; `out` is left as it is when it has not.
/// @throws json_path_error naming the path from `key` on.
template <class T>
void read_member(const nlohmann::json& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  try {
    read_json(*it, out);
  } catch (json_path_error& e) {
    e.prepend_key(key);
    throw;
  }
}

/// `j[key]` into `out`; `j` (an object) must have the key.
/// @throws json_path_error naming the path from `key` on ("key: missing" when it is absent).
template <class T>
void read_required_member(const nlohmann::json& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    json_path_error e("missing");
    e.prepend_key(key);
    throw e;
  }
  read_member(j, key, out);
}

}  // namespace gpu_basics

#define GPU_BASICS_JSON_READ_MEMBER(v1) \
  ::gpu_basics::read_member(nlohmann_json_j, #v1, nlohmann_json_t.v1);

/// to_json/from_json for a struct's listed members; from_json keeps a member's default when its
/// key is absent, so files written before a member existed still load, and throws
/// gpu_basics::json_path_error naming the member's path where a value cannot be read.
#define GPU_BASICS_JSON(Type, ...)                                                      \
  inline void to_json(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) {   \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))            \
  }                                                                                     \
  inline void from_json(const nlohmann::json& nlohmann_json_j, Type& nlohmann_json_t) { \
    ::gpu_basics::require_json_object(nlohmann_json_j);                                 \
    nlohmann_json_t = Type{};                                                           \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(GPU_BASICS_JSON_READ_MEMBER, __VA_ARGS__)) \
  }

#define GPU_BASICS_JSON_READ_REQUIRED_MEMBER(v1) \
  ::gpu_basics::read_required_member(nlohmann_json_j, #v1, nlohmann_json_t.v1);

/// As GPU_BASICS_JSON, for documents every key of which must be there (a file whose keys are all
/// written by one version, as advise's): a missing member is a json_path_error naming it.
#define GPU_BASICS_JSON_STRICT(Type, ...)                                                        \
  inline void to_json(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) {            \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))                     \
  }                                                                                              \
  inline void from_json(const nlohmann::json& nlohmann_json_j, Type& nlohmann_json_t) {          \
    ::gpu_basics::require_json_object(nlohmann_json_j);                                          \
    nlohmann_json_t = Type{};                                                                    \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(GPU_BASICS_JSON_READ_REQUIRED_MEMBER, __VA_ARGS__)) \
  }

// JSON for the library's data types: std::optional as "null or the value" (nlohmann_json before
// 3.12 has no such serializer), and the macro that gives a plain struct lossless to_json/from_json
// where a key missing from older files takes the member's default. Host-only.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

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

/// to_json/from_json for a struct's listed members; from_json keeps a member's default when its
/// key is absent, so files written before a member existed still load.
#define GPU_BASICS_JSON(Type, ...) \
  NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Type, __VA_ARGS__)

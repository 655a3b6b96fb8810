#include "gpu_basics/core/json.hpp"

#include <regex>

namespace gpu_basics {

std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::string:
      return quote_for_message(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "nothing";
    default:  // booleans and numbers, as JSON writes them
      return j.dump();
  }
}

json_path_error json_type_error(const char* expected, const nlohmann::json& j) {
  return json_path_error(std::string("expected ") + expected + ", got " + json_kind(j));
}

json_path_error json_path_error_of(const nlohmann::json::exception& e) {
  std::string what = e.what();
  // "[json.exception.type_error.302] type must be number, but is null"
  if (what.starts_with("[json.exception.")) {
    if (const auto end = what.find("] "); end != std::string::npos) what.erase(0, end + 2);
  }
  static const std::regex type_re(R"(^type must be (\w+), but is (\w+)$)");
  std::smatch m;
  if (std::regex_match(what, m, type_re))
    what = "expected " + m[1].str() + ", got " + (m[2] == "array" ? "a list" : m[2].str());
  return json_path_error(message_line(what, 200));
}

void require_json_object(const nlohmann::json& j) {
  if (!j.is_object()) throw json_type_error("an object", j);
}

}  // namespace gpu_basics

// The JSON parser behind results files (parse_results_json): RFC 8259 text into an nlohmann tree,
// several times faster than nlohmann's own parser (results files reach tens of MB, and a fleet
// is hundreds of files), with the limits of a file from elsewhere (nesting depth, string length)
// checked as it goes, and every refusal naming the key path of the value it stopped at.
// Private to the lessons module; host-only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpu_basics::lessons::detail {

/// What parse_json_text accepts beyond the grammar.
struct json_text_limits {
  int max_depth = 64;                  // arrays and objects nested in one another
  std::size_t max_string = 64 * 1024;  // bytes of a string or key, once unescaped
};

/// `text` (UTF-8, an optional byte order mark first) as a tree: numbers as nlohmann keeps them
/// (unsigned or signed 64-bit integers where they fit, else double), the last of repeated keys.
/// Checks for an interruption (throw_if_interrupted) every 65536 values.
/// @throws format_error "<source>: not JSON at line L, column C (<key path>): <why>" for text
/// that is not JSON, and "<source>: <key path>: <why>" for a value beyond `limits` or a number
/// beyond the range of a double.
[[nodiscard]] nlohmann::json parse_json_text(std::string_view text, const std::string& source,
                                             const json_text_limits& limits);

}  // namespace gpu_basics::lessons::detail

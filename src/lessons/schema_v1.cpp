#include "gpu_basics/lessons/schema_v1.hpp"

#include <array>
#include <cmath>
#include <regex>
#include <string_view>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics::lessons::schema_v1 {

std::uint64_t bytes_from_text(const std::string& text) {
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw format_error("'" + text + "' is not a size such as \"512 B\" or \"1.5 GiB\"");
  static constexpr std::array<std::string_view, 5> units = {"B", "KiB", "MiB", "GiB", "TiB"};
  int power = 0;
  while (units[static_cast<std::size_t>(power)] != m[2].str()) ++power;
  const double bytes = std::round(std::stod(m[1].str()) * std::ldexp(1.0, 10 * power));
  if (!(bytes < 0x1p64)) throw format_error("'" + text + "' is too large a size");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace gpu_basics::lessons::schema_v1

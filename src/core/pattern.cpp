#include "gpu_basics/core/pattern.hpp"

#include <cstring>

namespace gpu_basics {

void fill_pattern_host(void* dst, std::size_t bytes, std::uint32_t seed, std::size_t offset) {
  auto* p = static_cast<std::uint8_t*>(dst);
  std::size_t i = 0;
  for (; i < bytes && ((offset + i) & 3) != 0; ++i) p[i] = pattern_byte(seed, offset + i);
  for (; i + 4 <= bytes; i += 4) {
    const std::uint32_t w = pattern_word(seed, (offset + i) >> 2);
    std::memcpy(p + i, &w, 4);
  }
  for (; i < bytes; ++i) p[i] = pattern_byte(seed, offset + i);
}

std::size_t count_pattern_mismatches_host(const void* src, std::size_t bytes, std::uint32_t seed,
                                          std::size_t offset) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  std::size_t bad = 0;
  std::size_t i = 0;
  for (; i < bytes && ((offset + i) & 3) != 0; ++i) bad += p[i] != pattern_byte(seed, offset + i);
  for (; i + 4 <= bytes; i += 4) {
    std::uint32_t w;
    std::memcpy(&w, p + i, 4);
    const std::uint32_t want = pattern_word(seed, (offset + i) >> 2);
    if (w != want)
      for (int b = 0; b < 4; ++b) bad += ((w ^ want) >> (8 * b) & 0xff) != 0;
  }
  for (; i < bytes; ++i) bad += p[i] != pattern_byte(seed, offset + i);
  return bad;
}

}  // namespace gpu_basics

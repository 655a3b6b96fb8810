// The data pattern every measured copy carries: a pseudo-random 32-bit word per 4-byte index,
// from a seed, with no zero byte (so a zeroed or unwritten destination never passes). The same
// function runs on host and device, so either side can check a buffer without a reference copy.
// In core: copies (transfer) carry it and the profiler's matmul draws its operands from it. The
// device fill and check are in pattern_kernels.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu_basics/core/host_device.hpp"

namespace gpu_basics {

/// Word `word` of the pattern of `seed`: splitmix64 of (seed, index), every byte non-zero.
GPU_BASICS_HD inline constexpr std::uint32_t pattern_word(std::uint32_t seed, std::uint64_t word) {
  // splitmix64 finaliser over (seed, index)
  std::uint64_t z = (word + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(seed) + 1));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z) | 0x01010101u;  // every byte non-zero
}

/// Byte `i` of the pattern (little-endian words).
GPU_BASICS_HD inline constexpr std::uint8_t pattern_byte(std::uint32_t seed, std::uint64_t i) {
  return static_cast<std::uint8_t>(pattern_word(seed, i >> 2) >> ((i & 3) * 8));
}

/// Host: fills / checks [offset, offset + bytes) of a buffer holding the pattern from its start.
void fill_pattern_host(void* dst, std::size_t bytes, std::uint32_t seed, std::size_t offset = 0);
/// Returns the number of mismatching bytes (0 = intact).
[[nodiscard]] std::size_t count_pattern_mismatches_host(const void* src, std::size_t bytes,
                                                        std::uint32_t seed, std::size_t offset = 0);

}  // namespace gpu_basics

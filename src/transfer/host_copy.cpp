#include "gpu_basics/transfer/host_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpu_basics {

#if defined(__x86_64__)

namespace {

constexpr std::size_t kVector = 32;  // one AVX2 store
constexpr std::size_t kBlock = 128;  // two cache lines per loop iteration

/// The body of copy_streaming, compiled for AVX2 whatever the build's target: only called once
/// the CPU is known to have it.
__attribute__((target("avx2"))) void copy_streaming_avx2(std::byte* d, const std::byte* s,
                                                         std::size_t n) noexcept {
  // Up to the first 32-byte boundary of the destination (streaming stores need it aligned).
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(d) % kVector;
  const std::size_t head =
      misaligned == 0 ? 0 : (kVector - misaligned < n ? kVector - misaligned : n);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= kBlock; n -= kBlock, d += kBlock, s += kBlock) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  for (; n >= kVector; n -= kVector, d += kVector, s += kVector)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  std::memcpy(d, s, n);
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before returning
}

}  // namespace

bool streaming_copy_supported() noexcept {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

void copy_streaming(void* dst, const void* src, std::size_t n) noexcept {
  if (!streaming_copy_supported()) {
    std::memcpy(dst, src, n);
    return;
  }
  copy_streaming_avx2(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
}

#else

bool streaming_copy_supported() noexcept {
  return false;
}

void copy_streaming(void* dst, const void* src, std::size_t n) noexcept {
  std::memcpy(dst, src, n);
}

#endif

}  // namespace gpu_basics

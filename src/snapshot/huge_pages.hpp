// Large buffers backed by huge pages where the system offers them (internal to the snapshot
// module).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gpu_basics::detail {

/// Asks the kernel to back [p, p + bytes) with transparent huge pages (Linux's MADV_HUGEPAGE,
/// which matters where they are set to "madvise"), so that filling a buffer of hundreds of MB
/// takes hundreds of page faults, not a hundred thousand. A hint: where it is not supported,
/// nothing happens.
inline void advise_huge_pages(const void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t begin = (at + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t end = (at + bytes) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace gpu_basics::detail

// Host-side copies for staging: memcpy, or a copy with non-temporal (streaming) stores.
// Host-only.
#pragma once

#include <cstddef>

namespace gpu_basics {

/// Whether copy_streaming() uses streaming stores on this CPU (x86-64 with AVX2); where not, it
/// is a memcpy.
[[nodiscard]] bool streaming_copy_supported() noexcept;

/// Copies `n` bytes from `src` to `dst` (not overlapping) with non-temporal stores: the
/// destination's cache lines go to memory without being read first (no read-for-ownership) and
/// without displacing the cache. For a large copy into memory the CPU will not read again soon
/// (a staging buffer that a DMA engine reads, the destination of a download) ordinary stores
/// read every destination line before writing it: a third of a memcpy's DRAM traffic that these
/// stores do not cause. Ends with a store fence: the data is visible to other threads and
/// devices once it returns. A memcpy where streaming_copy_supported() is false.
void copy_streaming(void* dst, const void* src, std::size_t n) noexcept;

}  // namespace gpu_basics

// The handshake between a thread cache's owner and the allocator's lock holder (private to the
// memory module). The owner's fast path is frequent and the lock holder's visits are rare, so
// the cost of ordering the two is put on the rare side: an asymmetric Dekker handshake.
//
//   owner (every fast operation)          lock holder (sweeping, adopting, stats)
//   busy = 1                              claimed = 1
//   light fence                           heavy fence
//   if claimed: busy = 0, take the lock   wait until busy == 0
//   ... work on its cache ...             ... work on the cache ...
//   busy = 0 (release)                    claimed = 0 (release)
//
// Either the owner sees `claimed` and backs off, or the lock holder sees `busy` and waits: with
// both fences, the two stores cannot both be missed. Where the kernel offers an expedited
// membarrier, the heavy fence makes every running thread of the process execute a full barrier,
// so the light fence only has to stop the compiler; the owner's fast path is then plain loads
// and stores, without the two atomic read-modify-writes a lock would cost. Elsewhere (and under
// ThreadSanitizer, which does not model membarrier), both sides use sequentially consistent
// atomics, a symmetric handshake as costly as a lock.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpu_basics::allocator_detail {

/// Whether heavy_fence() is a process-wide barrier (Linux's expedited private membarrier,
/// registered on the first call). Decided once per process.
[[nodiscard]] bool asymmetric_fences() noexcept;

/// The lock holder's side of the handshake: with `asymmetric`, a barrier on every running thread
/// of the process; otherwise a plain full fence.
void heavy_fence(bool asymmetric) noexcept;

/// One thread cache's two handshake flags, each written by one side only.
struct cache_handshake {
  std::atomic<std::uint32_t> busy{0};     // the owner is inside a fast operation
  std::atomic<std::uint32_t> claimed{0};  // the allocator's lock holder is working on the cache
};

/// The owner's side, for one fast operation: true (the cache is the owner's until destruction)
/// unless the lock holder has claimed the cache; then the owner takes the shared path.
class owner_section {
 public:
  owner_section(cache_handshake& h, bool asymmetric) noexcept : h_(h) {
    if (asymmetric) {
      h.busy.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      h.busy.exchange(1, std::memory_order_seq_cst);
    }
    entered_ = h.claimed.load(std::memory_order_seq_cst) == 0;
    if (!entered_) h.busy.store(0, std::memory_order_release);
  }
  ~owner_section() {
    if (entered_) h_.busy.store(0, std::memory_order_release);
  }
  owner_section(const owner_section&) = delete;
  owner_section& operator=(const owner_section&) = delete;
  explicit operator bool() const noexcept { return entered_; }

 private:
  cache_handshake& h_;
  bool entered_ = false;
};

}  // namespace gpu_basics::allocator_detail

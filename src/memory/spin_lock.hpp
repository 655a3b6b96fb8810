// The caching allocator's lock: a test-and-test-and-set spin lock (private to the memory module).
#pragma once

#include <atomic>
#include <thread>

#include "gpu_basics/core/cpu_relax.hpp"

namespace gpu_basics::allocator_detail {

using gpu_basics::cpu_relax;

/// A test-and-test-and-set lock: the allocator's critical sections are a few dozen
/// nanoseconds, shorter than a futex round trip, so waiters spin briefly and then yield.
class spin_lock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
          spins = 0;
        } else {
          cpu_relax();
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace gpu_basics::allocator_detail

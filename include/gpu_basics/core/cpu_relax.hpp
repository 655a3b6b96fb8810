// A spin-wait hint for the core, shared by the thread pool and the allocator's spin lock.
#pragma once

namespace gpu_basics {

/// Tells the core this thread is spin-waiting: x86 `pause`, AArch64 `yield` (both let a sibling
/// hardware thread run and save power); nothing on other targets.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

}  // namespace gpu_basics

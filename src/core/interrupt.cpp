#include "gpu_basics/core/interrupt.hpp"

#include <atomic>
#include <csignal>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

namespace {
std::atomic<int> g_signal{0};  // lock-free int: safe to store from a signal handler
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_signal(int signal_number) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal_number);
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // the second signal takes the default action; no SA_RESTART
  for (const int s : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    // A signal the parent set to be ignored (nohup, a shell's background job) stays ignored.
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(s, &action, nullptr);
  }
}

int interrupt_signal() noexcept {
  return g_signal.load();
}

void throw_if_interrupted() {
  if (const int s = g_signal.load(); s != 0) throw interrupted(s);
}

void clear_interrupt() noexcept {
  g_signal.store(0);
}

}  // namespace gpu_basics

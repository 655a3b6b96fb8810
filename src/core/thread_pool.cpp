#include "gpu_basics/core/thread_pool.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "gpu_basics/core/cpu_relax.hpp"

namespace gpu_basics {

thread_pool::thread_pool(unsigned threads, std::chrono::microseconds spin)
    : spin_(std::max(spin, std::chrono::microseconds{0})) {
  const unsigned n = std::max(1u, threads);
  workers_.reserve(n - 1);
  for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  stop_.store(true);
  {
    std::lock_guard lock(mutex_);  // a worker between its check and its wait sees stop_ after
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

template <class Ready>
void thread_pool::await(std::condition_variable& cv, std::atomic<int>& sleepers, Ready ready) {
  if (ready()) return;
  if (spin_.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      if (ready()) return;
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() >= until) break;
        // A thread of this pool that the OS put on this core gets it while this one waits.
        std::this_thread::yield();
      }
    }
  }
  std::unique_lock lock(mutex_);
  // Announce the sleep before the last look (both seq_cst): a waker that bumps the state after
  // that look sees the sleeper and takes the mutex, which it can only get once this thread waits.
  sleepers.fetch_add(1);
  cv.wait(lock, ready);
  sleepers.fetch_sub(1);
}

void thread_pool::wake(std::condition_variable& cv, const std::atomic<int>& sleepers) {
  if (sleepers.load() == 0) return;
  { std::lock_guard lock(mutex_); }
  cv.notify_all();
}

namespace {
// The low half of thread_pool::state_ while the caller sets the next loop up: no task index.
constexpr std::uint32_t kClosed = 0xffffffffu;
}  // namespace

void thread_pool::run_tasks(std::uint32_t generation) {
  std::uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<std::uint32_t>(s >> 32) != generation) return;  // a newer loop
    // tasks_ may already be a newer loop's (acquire: then this thread also sees the newer loop's
    // closing of state_, which came first, and the exchange below fails).
    const std::size_t tasks = tasks_.load(std::memory_order_acquire);
    const std::size_t i = static_cast<std::uint32_t>(s);
    if (i >= tasks) return;  // all taken, or closed
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
      continue;
    // Task i of this loop is ours: the loop cannot finish, nor job_ change, before it is done.
    try {
      (*job_.load(std::memory_order_relaxed))(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // Release: the task's writes happen before the caller's acquire of the count.
    if (done_tasks_.fetch_add(1) + 1 == tasks) wake(done_, sleeping_callers_);
    s = state_.load(std::memory_order_acquire);
  }
}

void thread_pool::worker_loop() {
  std::uint32_t seen = 0;
  // The generation of the loop published last; a loop still being set up is not published yet.
  const auto published = [&] {
    const std::uint64_t s = state_.load();
    return static_cast<std::uint32_t>(s) == kClosed ? seen : static_cast<std::uint32_t>(s >> 32);
  };
  for (;;) {
    await(wake_, sleeping_workers_, [&] { return stop_.load() || published() != seen; });
    if (stop_.load()) return;
    seen = published();
    run_tasks(seen);
  }
}

void thread_pool::parallel_for(std::size_t tasks, const std::function<void(std::size_t)>& fn,
                               const std::function<void()>& caller_first) {
  std::exception_ptr first_failed;
  const auto run_caller_first = [&] {
    if (!caller_first) return;
    try {
      caller_first();
    } catch (...) {
      first_failed = std::current_exception();  // the tasks reference this frame: finish them
    }
  };
  if (workers_.empty() || tasks <= 1) {
    // As on the pool: every task runs, then caller_first's exception, else the first task's.
    run_caller_first();
    std::exception_ptr task_failed;
    for (std::size_t i = 0; i < tasks; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!task_failed) task_failed = std::current_exception();
      }
    }
    if (first_failed) std::rethrow_exception(first_failed);
    if (task_failed) std::rethrow_exception(task_failed);
    return;
  }
  // Task indices share state_ with the generation: larger loops run in rounds.
  constexpr std::size_t kMaxTasks = kClosed - 1;
  for (std::size_t first = 0, n = 0; first < tasks; first += n) {
    n = std::min(kMaxTasks, tasks - first);
    const std::function<void(std::size_t)> shifted = [&](std::size_t i) { fn(first + i); };
    const auto* job = first == 0 && n == tasks ? &fn : &shifted;
    // Closed first: a worker that read the previous loop's state before this can no longer take
    // a task with it, whatever tasks_ it then reads (short of stalling through 2^32 loops, when
    // the 32-bit generation comes round again).
    const std::uint32_t g = ++generation_;
    state_.store(std::uint64_t{g} << 32 | kClosed);
    job_.store(job, std::memory_order_relaxed);
    tasks_.store(n, std::memory_order_release);
    done_tasks_.store(0, std::memory_order_relaxed);
    state_.store(std::uint64_t{g} << 32);  // publishes the loop (seq_cst, so a release)
    wake(wake_, sleeping_workers_);
    if (first == 0) run_caller_first();
    run_tasks(g);
    await(done_, sleeping_callers_, [&] { return done_tasks_.load() == n; });
  }
  std::exception_ptr failure;
  {
    std::lock_guard lock(mutex_);
    failure = std::exchange(error_, nullptr);
  }
  if (first_failed) std::rethrow_exception(first_failed);
  if (failure) std::rethrow_exception(failure);
}

void thread_pool::parallel_ranges(std::size_t bytes, std::size_t align,
                                  const std::function<void(std::size_t, std::size_t)>& fn,
                                  unsigned pieces_per_thread,
                                  const std::function<void()>& caller_first) {
  // No bytes: no parts, and parallel_for() still runs caller_first.
  align = std::max<std::size_t>(1, align);
  const std::size_t units = (bytes + align - 1) / align;
  const std::size_t parts =
      std::min<std::size_t>(std::size_t{size()} * std::max(1u, pieces_per_thread), units);
  parallel_for(
      parts,
      [&](std::size_t p) {
        const std::size_t begin = std::min(bytes, units * p / parts * align);
        const std::size_t end = std::min(bytes, units * (p + 1) / parts * align);
        if (end > begin) fn(begin, end - begin);
      },
      caller_first);
}

unsigned default_thread_count(unsigned cap) {
  const unsigned hw = std::thread::hardware_concurrency();
  return std::clamp(hw == 0 ? 1u : hw, 1u, std::max(1u, cap));
}

}  // namespace gpu_basics

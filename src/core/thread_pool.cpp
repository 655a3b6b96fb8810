#include "gpu_basics/core/thread_pool.hpp"

#include <algorithm>
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
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
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

void thread_pool::run_tasks() {
  const auto* job = job_;
  const std::size_t tasks = tasks_;
  for (std::size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < tasks;
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    try {
      (*job)(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void thread_pool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    await(wake_, sleeping_workers_, [&] { return stop_.load() || generation_.load() != seen; });
    if (stop_.load()) return;
    seen = generation_.load();
    run_tasks();
    // Release: the tasks' writes happen before the caller's acquire of the count.
    if (checked_out_.fetch_add(1) + 1 == workers_.size()) wake(done_, sleeping_callers_);
  }
}

void thread_pool::parallel_for(std::size_t tasks, const std::function<void(std::size_t)>& fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::size_t i = 0; i < tasks; ++i) fn(i);
    return;
  }
  // Every worker checked out of the last loop, so none reads these while they change.
  job_ = &fn;
  tasks_ = tasks;
  next_.store(0, std::memory_order_relaxed);
  checked_out_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  generation_.fetch_add(1);  // publishes the loop (seq_cst, so a release)
  wake(wake_, sleeping_workers_);
  run_tasks();
  const std::size_t workers = workers_.size();
  await(done_, sleeping_callers_, [&] { return checked_out_.load() == workers; });
  job_ = nullptr;
  std::exception_ptr failure;
  {
    std::lock_guard lock(mutex_);
    failure = std::exchange(error_, nullptr);
  }
  if (failure) std::rethrow_exception(failure);
}

void thread_pool::parallel_ranges(std::size_t bytes, std::size_t align,
                                  const std::function<void(std::size_t, std::size_t)>& fn,
                                  unsigned pieces_per_thread) {
  if (bytes == 0) return;
  align = std::max<std::size_t>(1, align);
  const std::size_t units = (bytes + align - 1) / align;
  const std::size_t parts =
      std::min<std::size_t>(std::size_t{size()} * std::max(1u, pieces_per_thread), units);
  parallel_for(parts, [&](std::size_t p) {
    const std::size_t begin = std::min(bytes, units * p / parts * align);
    const std::size_t end = std::min(bytes, units * (p + 1) / parts * align);
    if (end > begin) fn(begin, end - begin);
  });
}

unsigned default_thread_count(unsigned cap) {
  const unsigned hw = std::thread::hardware_concurrency();
  return std::clamp(hw == 0 ? 1u : hw, 1u, std::max(1u, cap));
}

}  // namespace gpu_basics

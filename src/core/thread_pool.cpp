#include "gpu_basics/core/thread_pool.hpp"

#include <algorithm>
#include <utility>

namespace gpu_basics {

thread_pool::thread_pool(unsigned threads) {
  const unsigned n = std::max(1u, threads);
  workers_.reserve(n - 1);
  for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::drain(std::unique_lock<std::mutex>& lock) {
  // Takes task indices until none is left; the lock is held between tasks, not during one.
  while (job_ && next_ < tasks_) {
    const std::size_t i = next_++;
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      (*job)(i);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    if (++finished_ == tasks_) done_.notify_all();
  }
}

void thread_pool::worker_loop() {
  std::size_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    drain(lock);
  }
}

void thread_pool::parallel_for(std::size_t tasks, const std::function<void(std::size_t)>& fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::size_t i = 0; i < tasks; ++i) fn(i);
    return;
  }
  std::unique_lock lock(mutex_);
  job_ = &fn;
  tasks_ = tasks;
  next_ = 0;
  finished_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  drain(lock);
  done_.wait(lock, [&] { return finished_ == tasks_; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void thread_pool::parallel_ranges(std::size_t bytes, std::size_t align,
                                  const std::function<void(std::size_t, std::size_t)>& fn) {
  if (bytes == 0) return;
  align = std::max<std::size_t>(1, align);
  const std::size_t units = (bytes + align - 1) / align;
  const std::size_t parts = std::min<std::size_t>(size(), units);
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

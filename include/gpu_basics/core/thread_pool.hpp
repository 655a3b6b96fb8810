// A persistent pool of host threads for data-parallel loops (staging copies, fills, checks).
// Threads are created once, so a loop costs a wake-up, not a thread start. Host-only.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpu_basics {

class thread_pool {
 public:
  /// `threads` workers in all, the calling thread counted: 1 runs everything on the caller.
  explicit thread_pool(unsigned threads);
  /// Stops and joins the workers.
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Threads a loop runs on, the caller included.
  [[nodiscard]] unsigned size() const noexcept {
    return static_cast<unsigned>(workers_.size()) + 1;
  }

  /// Runs fn(0) … fn(tasks − 1) on the pool and the caller; returns when all are done. The first
  /// exception thrown by a task is rethrown here (the other tasks still finish).
  void parallel_for(std::size_t tasks, const std::function<void(std::size_t)>& fn);

  /// Splits [0, bytes) into one contiguous range per thread (aligned to `align` bytes) and runs
  /// fn(offset, length) for each. A range's exception is rethrown as by parallel_for().
  void parallel_ranges(std::size_t bytes, std::size_t align,
                       const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void worker_loop();
  void drain(std::unique_lock<std::mutex>& lock);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t tasks_ = 0;
  std::size_t next_ = 0;
  std::size_t finished_ = 0;
  std::size_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

/// One worker per core, at most `cap`; at least 1.
[[nodiscard]] unsigned default_thread_count(unsigned cap = 16);

}  // namespace gpu_basics

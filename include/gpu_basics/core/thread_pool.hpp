// A persistent pool of host threads for data-parallel loops (staging copies, fills, checks).
// Threads are created once, so a loop costs a wake-up, not a thread start; between loops that
// follow each other closely (a staged copy's chunks) the workers spin for a short while instead
// of sleeping, so the hand-over costs about a microsecond instead of a futex round trip per
// thread, and yield while they spin, so a thread of the pool that the OS put on the same core
// gets it. A loop ends when its tasks are done, whether or not every worker has looked in: a
// worker the OS has not scheduled holds nothing up. Host-only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpu_basics {

class thread_pool {
 public:
  /// How long an idle worker (or a caller waiting for the workers) spins before it sleeps.
  static constexpr std::chrono::microseconds kDefaultSpin{200};

  /// `threads` workers in all, the calling thread counted: 1 runs everything on the caller.
  /// `spin`: how long idle threads spin before they sleep (0: sleep at once).
  explicit thread_pool(unsigned threads, std::chrono::microseconds spin = kDefaultSpin);
  /// Stops and joins the workers.
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Threads a loop runs on, the caller included.
  [[nodiscard]] unsigned size() const noexcept {
    return static_cast<unsigned>(workers_.size()) + 1;
  }

  /// Runs fn(0) … fn(tasks − 1) on the pool and the caller; returns when all are done. Tasks are
  /// taken one at a time, so uneven tasks balance. The first exception thrown by a task is
  /// rethrown here (the other tasks still finish). One loop at a time: not reentrant, and not
  /// to be called from two threads at once.
  ///
  /// `caller_first`, when set, runs once on the calling thread after the loop is handed to the
  /// workers and before the caller takes tasks: work that must run on this thread (a CUDA call
  /// on its stream) then overlaps the loop instead of holding the workers up. Its exception is
  /// rethrown once the tasks are done, before any task's.
  void parallel_for(std::size_t tasks, const std::function<void(std::size_t)>& fn,
                    const std::function<void()>& caller_first = {});

  /// Splits [0, bytes) into `pieces_per_thread` contiguous ranges per thread (aligned to `align`
  /// bytes) and runs fn(offset, length) for each. With one range per thread a thread that the OS
  /// slows (another runnable thread on its core) holds the whole loop up; with several, the
  /// others take its share, as parallel_for() hands ranges out one at a time. A range's
  /// exception is rethrown as by parallel_for(); `caller_first` runs as there.
  void parallel_ranges(std::size_t bytes, std::size_t align,
                       const std::function<void(std::size_t, std::size_t)>& fn,
                       unsigned pieces_per_thread = 1,
                       const std::function<void()>& caller_first = {});

 private:
  void worker_loop();
  /// Runs the tasks of loop `generation` that are still untaken; stops at the first taken-out
  /// or stale one.
  void run_tasks(std::uint32_t generation);
  /// Spins up to spin_, then sleeps on `cv` (counted in `sleepers`) until `ready()` holds.
  template <class Ready>
  void await(std::condition_variable& cv, std::atomic<int>& sleepers, Ready ready);
  void wake(std::condition_variable& cv, const std::atomic<int>& sleepers);

  std::vector<std::thread> workers_;
  std::chrono::microseconds spin_;
  // A loop is published by storing {generation, 0} into state_ (release) after job_ and tasks_
  // are set. A task is taken by a compare-exchange of {generation, i} to {generation, i + 1}, so
  // a worker still holding an old generation can never take a task of a newer loop. The caller
  // waits for the tasks to be done, not for every worker to look in: a worker the OS has not
  // scheduled (another thread on its core) then holds nothing up, and the others take its share.
  std::atomic<std::uint64_t> state_{0};  // generation << 32 | next task
  std::uint32_t generation_ = 0;         // the caller's
  std::atomic<const std::function<void(std::size_t)>*> job_{nullptr};
  std::atomic<std::size_t> tasks_{0};
  std::atomic<std::size_t> done_tasks_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;              // guards sleeping and error_
  std::condition_variable wake_;  // workers wait here for a new generation
  std::condition_variable done_;  // the caller waits here for the workers to check out
  std::atomic<int> sleeping_workers_{0};
  std::atomic<int> sleeping_callers_{0};
  std::exception_ptr error_;
};

/// One worker per core, at most `cap`; at least 1.
[[nodiscard]] unsigned default_thread_count(unsigned cap = 16);

}  // namespace gpu_basics

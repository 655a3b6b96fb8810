// A thread's own latency in multi-threaded Google Benchmark runs. With Threads(n), the time
// column is the wall time divided by the iterations of all n threads together (the inverse of
// the throughput), n times less than what each thread waits per iteration. The counter
// "ns_per_thread" reports that wait: each thread's wall time over its own iterations, averaged
// over the threads.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>

namespace gpu_basics::bench {

/// Started just before a benchmark's loop; report() just after it.
class per_thread_latency {
 public:
  per_thread_latency() : start_(std::chrono::steady_clock::now()) {}
  void report(benchmark::State& state) const {
    const std::chrono::duration<double, std::nano> spent =
        std::chrono::steady_clock::now() - start_;
    if (state.iterations() == 0) return;
    state.counters["ns_per_thread"] = benchmark::Counter(
        spent.count() / static_cast<double>(state.iterations()), benchmark::Counter::kAvgThreads);
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gpu_basics::bench

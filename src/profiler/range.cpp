#include "gpu_basics/profiler/range.hpp"

#include <pthread.h>

#include <atomic>
#include <mutex>

#include <nvtx3/nvToolsExt.h>

#include "gpu_basics/core/clock.hpp"

namespace gpu_basics {

// CUPTI's API records carry the low 32 bits of pthread_self() (seen on the H200's driver 580).
std::uint64_t trace_thread_id() noexcept {
  return static_cast<std::uint32_t>(pthread_self());
}

namespace {
struct range_state {
  std::mutex mutex;
  std::vector<range_record> ranges;
  std::atomic<bool> on{false};
};
range_state& ranges() {
  static range_state s;
  return s;
}
}  // namespace

void range_log::start_recording() {
  auto& s = ranges();
  std::lock_guard lock(s.mutex);
  s.ranges.clear();
  s.on = true;
}

std::vector<range_record> range_log::stop_recording() {
  auto& s = ranges();
  std::lock_guard lock(s.mutex);
  s.on = false;
  return std::move(s.ranges);
}

bool range_log::recording() noexcept {
  return ranges().on.load(std::memory_order_relaxed);
}

void range_log::record(range_record r) {
  auto& s = ranges();
  std::lock_guard lock(s.mutex);
  if (s.on) s.ranges.push_back(std::move(r));
}

scoped_range::scoped_range(std::string name) : name_(std::move(name)), start_ns_(host_clock_ns()) {
  nvtxRangePushA(name_.c_str());
}

scoped_range::~scoped_range() {
  nvtxRangePop();
  if (range_log::recording())
    range_log::record({std::move(name_), start_ns_, host_clock_ns(), trace_thread_id()});
}

}  // namespace gpu_basics

#include "gpu_basics/memory/fake_backend.hpp"

#include <cstdlib>
#include <new>

namespace gpu_basics {

fake_backend::fake_backend(std::size_t capacity, bool fake_addresses)
    : capacity_(capacity), fake_addresses_(fake_addresses) {}

fake_backend::~fake_backend() {
  for (auto* e : events_) delete e;
  if (!fake_addresses_)
    for (auto& [p, n] : live_) std::free(p);
}

void* fake_backend::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (fail_next_ > 0) {
    --fail_next_;
    return nullptr;
  }
  if (bytes == 0 || bytes > capacity_ - used_) return nullptr;
  void* p = nullptr;
  if (fake_addresses_) {
    p = reinterpret_cast<void*>(next_fake_);
    next_fake_ += (bytes + 4095) / 4096 * 4096 + 4096;  // a guard gap between segments
  } else {
    p = std::aligned_alloc(512, (bytes + 511) / 512 * 512);
    if (!p) return nullptr;
  }
  used_ += bytes;
  ++allocations_;
  live_.emplace(p, bytes);
  return p;
}

void fake_backend::deallocate(void* p, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  const auto it = live_.find(p);
  if (it == live_.end() || it->second != bytes) {  // a bookkeeping bug in the caller
    ++bad_deallocations_;
    return;
  }
  live_.erase(it);
  used_ -= bytes;
  if (!fake_addresses_) std::free(p);
}

event_handle fake_backend::record_event(stream_handle s) {
  std::lock_guard lock(mutex_);
  auto* e = new event{s, false};
  events_.insert(e);
  return e;
}

bool fake_backend::event_done(event_handle e) {
  std::lock_guard lock(mutex_);
  return static_cast<event*>(e)->done;
}

void fake_backend::release_event(event_handle e) noexcept {
  std::lock_guard lock(mutex_);
  auto* ev = static_cast<event*>(e);
  events_.erase(ev);
  delete ev;
}

void fake_backend::synchronize() {
  std::lock_guard lock(mutex_);
  for (auto* e : events_) e->done = true;
}

std::pair<std::size_t, std::size_t> fake_backend::memory_info() {
  std::lock_guard lock(mutex_);
  return {capacity_ - used_, capacity_};
}

void fake_backend::complete_stream(stream_handle s) {
  std::lock_guard lock(mutex_);
  for (auto* e : events_)
    if (e->stream == s) e->done = true;
}

void fake_backend::fail_next_allocations(int n) {
  std::lock_guard lock(mutex_);
  fail_next_ = n;
}

std::size_t fake_backend::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}
std::size_t fake_backend::allocations() const {
  std::lock_guard lock(mutex_);
  return allocations_;
}
std::size_t fake_backend::bad_deallocations() const {
  std::lock_guard lock(mutex_);
  return bad_deallocations_;
}
std::size_t fake_backend::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace gpu_basics

#include "gpu_basics/memory/pinned_pool.hpp"

#include <algorithm>
#include <bit>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/event_poll.hpp"

namespace gpu_basics {

std::size_t pinned_size_class(std::size_t bytes) noexcept {
  if (bytes <= 4096) return 4096;
  const unsigned e = static_cast<unsigned>(std::bit_width(bytes) - 1);  // 2^e <= bytes < 2^(e+1)
  const std::size_t step = std::size_t{1} << (e - 3);
  return (bytes + step - 1) / step * step;
}

pinned_host_pool::pinned_host_pool(std::shared_ptr<allocator_backend> backend)
    : backend_(std::move(backend)) {
  GPU_BASICS_EXPECTS(backend_ != nullptr, "pinned_host_pool needs a backend");
}

pinned_host_pool::~pinned_host_pool() {
  std::lock_guard lock(mutex_);
  try {
    backend_->synchronize();
  } catch (...) {
  }
  process_events();
  (void)release_cached();
  for (auto& [e, p] : pending_) backend_->release_event(e);
}

void pinned_host_pool::process_events() {
  poll_completed(
      pending_, [&](const auto& entry) { return backend_->event_done(entry.first); },
      [&](const auto& entry) {
        backend_->release_event(entry.first);
        block& b = blocks_.at(entry.second);
        if (--b.pending == 0) free_[b.size].push_back(entry.second);
      });
}

std::size_t pinned_host_pool::release_cached() {
  std::size_t released = 0;
  for (auto& [size, list] : free_) {
    for (void* p : list) {
      const double t0 = host_seconds();
      backend_->deallocate(p, size);
      st_.unpin_seconds += host_seconds() - t0;
      blocks_.erase(p);
      st_.reserved_bytes.sub(static_cast<std::int64_t>(size));
      ++st_.backend_frees;
      released += size;
    }
    list.clear();
  }
  return released;
}

void* pinned_host_pool::pin(std::size_t bytes) {
  const double t0 = host_seconds();
  void* p = backend_->allocate(bytes);
  st_.pin_seconds += host_seconds() - t0;
  return p;
}

void* pinned_host_pool::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  process_events();
  const std::size_t cls = pinned_size_class(bytes);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    ++st_.cache_hits;
  } else {
    p = pin(cls);
    if (!p) {
      (void)release_cached();
      p = pin(cls);
    }
    if (!p)
      throw out_of_memory(fmt::format("cannot pin {} bytes of host memory ({} requested; {} pinned "
                                      "by this pool already)",
                                      cls, bytes, st_.reserved_bytes.current),
                          bytes);
    blocks_.emplace(p, block{p, cls, 0, false, 0, {}});
    st_.reserved_bytes.add(static_cast<std::int64_t>(cls));
    ++st_.backend_allocations;
  }
  block& b = blocks_.at(p);
  b.allocated = true;
  b.requested = bytes;
  st_.allocated_bytes.add(static_cast<std::int64_t>(cls));
  st_.requested_bytes.add(static_cast<std::int64_t>(bytes));
  st_.allocation_count.add(1);
  return p;
}

void pinned_host_pool::deallocate(void* p) {
  if (!p) return;
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || !it->second.allocated)
    throw logic_error(fmt::format("pinned_host_pool::deallocate({}): not a live allocation", p));
  block& b = it->second;
  b.allocated = false;
  st_.allocated_bytes.sub(static_cast<std::int64_t>(b.size));
  st_.requested_bytes.sub(static_cast<std::int64_t>(b.requested));
  st_.allocation_count.sub(1);
  if (b.uses.empty()) {
    free_[b.size].push_back(p);
    return;
  }
  for (stream_handle s : b.uses) {
    pending_.emplace_back(backend_->record_event(s), p);
    ++b.pending;
  }
  b.uses.clear();
}

void pinned_host_pool::record_stream(void* p, stream_handle s) {
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || !it->second.allocated)
    throw logic_error(fmt::format("pinned_host_pool::record_stream({}): not a live allocation", p));
  auto& uses = it->second.uses;
  if (std::find(uses.begin(), uses.end(), s) == uses.end()) uses.push_back(s);
}

std::size_t pinned_host_pool::empty_cache() {
  std::lock_guard lock(mutex_);
  process_events();
  return release_cached();
}

pinned_pool_stats pinned_host_pool::stats() const {
  std::lock_guard lock(mutex_);
  return st_;
}

void to_json(nlohmann::json& j, const pinned_pool_stats& s) {
  j = {{"allocated_bytes", s.allocated_bytes},
       {"requested_bytes", s.requested_bytes},
       {"reserved_bytes", s.reserved_bytes},
       {"allocation_count", s.allocation_count},
       {"backend_allocations", s.backend_allocations},
       {"backend_frees", s.backend_frees},
       {"cache_hits", s.cache_hits},
       {"pin_seconds", s.pin_seconds},
       {"unpin_seconds", s.unpin_seconds}};
}

}  // namespace gpu_basics

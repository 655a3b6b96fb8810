#include "gpu_basics/memory/fake_backend.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <iterator>
#include <new>

namespace gpu_basics {

std::string address_placement::name() const {
  switch (order) {
    case address_order::ascending:
      return "ascending";
    case address_order::descending:
      return "descending";
    case address_order::shuffled:
      break;
  }
  return "shuffled (seed " + std::to_string(seed) + ")";
}

std::shared_ptr<fake_backend> simulated_device(address_placement placement) {
  auto b = std::make_shared<fake_backend>(std::size_t{1} << 46, /*fake_addresses=*/true);
  b->set_address_placement(placement);
  return b;
}

fake_backend::fake_backend(std::size_t capacity, bool fake_addresses)
    : capacity_(capacity), fake_addresses_(fake_addresses) {}

void fake_backend::set_address_placement(address_placement p) {
  std::lock_guard lock(mutex_);
  placement_ = p;
  // splitmix64 of the seed: neighbouring seeds give unrelated orders.
  std::uint64_t z = p.seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  rng_ = z ^ (z >> 31);
  if (rng_ == 0) rng_ = 1;  // xorshift stays at 0 forever
}

fake_backend::~fake_backend() {
  for (auto* e : events_) delete e;
  if (!fake_addresses_)
    for (auto& [base, n] : reservations_) munmap(reinterpret_cast<void*>(base), n);
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
    const std::size_t span = (bytes + 4095) / 4096 * 4096 + 4096;  // a guard gap after each
    // Shuffled: one of kSlots slots of kSlot bytes from kSlotBase up, picked at random among the
    // free ones (an allocation too large for a slot takes the next ascending address).
    if (placement_.order == address_order::shuffled && span <= kSlot && slots_.size() < kSlots) {
      std::uintptr_t slot = 0;
      do {
        rng_ ^= rng_ << 13;
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        slot = rng_ % kSlots;
      } while (slots_.count(slot));
      slots_.insert(slot);
      p = reinterpret_cast<void*>(kSlotBase + slot * kSlot);
    } else if (placement_.order == address_order::descending) {
      next_down_ -= span;
      p = reinterpret_cast<void*>(next_down_);
    } else {
      p = reinterpret_cast<void*>(next_fake_);
      next_fake_ += span;
    }
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
  // Only shuffled slots lie at kSlotBase and above (descending addresses start below it).
  if (const auto at = reinterpret_cast<std::uintptr_t>(p); fake_addresses_ && at >= kSlotBase)
    slots_.erase((at - kSlotBase) / kSlot);
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

std::size_t fake_backend::shuffled_slots() const {
  std::lock_guard lock(mutex_);
  return slots_.size();
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

namespace gpu_basics {

namespace {
constexpr std::size_t kAlign = std::size_t{2} << 20;
}

std::uintptr_t fake_backend::reserve_address(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (!virtual_memory_ || bytes == 0) return 0;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  std::uintptr_t base = 0;
  if (fake_addresses_) {
    next_fake_ = (next_fake_ + kAlign - 1) / kAlign * kAlign;
    base = next_fake_;
    next_fake_ += bytes + kAlign;
  } else {
    // Over-reserve by one alignment unit and trim, so the range starts on a 2 MiB boundary.
    void* p = mmap(nullptr, bytes + kAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return 0;
    const auto raw = reinterpret_cast<std::uintptr_t>(p);
    base = (raw + kAlign - 1) / kAlign * kAlign;
    if (base > raw) munmap(p, base - raw);
    const std::uintptr_t end = raw + bytes + kAlign;
    if (end > base + bytes) munmap(reinterpret_cast<void*>(base + bytes), end - (base + bytes));
  }
  reservations_.emplace(base, bytes);
  return base;
}

void fake_backend::release_address(std::uintptr_t base, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  const auto it = reservations_.find(base);
  const auto m = mappings_.lower_bound(base);
  if (it == reservations_.end() || it->second != bytes ||
      (m != mappings_.end() && m->first < base + bytes)) {  // unknown, or still mapped inside
    ++bad_deallocations_;
    return;
  }
  if (!fake_addresses_) munmap(reinterpret_cast<void*>(base), bytes);
  reservations_.erase(it);
}

bool fake_backend::map(std::uintptr_t ptr, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (fail_next_ > 0) {
    --fail_next_;
    return false;
  }
  if (bytes == 0 || bytes > capacity_ - used_) return false;
  // Inside one reservation, and overlapping no mapping.
  auto r = reservations_.upper_bound(ptr);
  bool inside = r != reservations_.begin();
  if (inside) {
    --r;
    inside = ptr + bytes <= r->first + r->second;
  }
  const auto next = mappings_.lower_bound(ptr);
  const bool overlaps =
      (next != mappings_.end() && next->first < ptr + bytes) ||
      (next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second > ptr);
  if (!inside || overlaps) {
    ++bad_deallocations_;
    return false;
  }
  if (!fake_addresses_ &&
      mprotect(reinterpret_cast<void*>(ptr), bytes, PROT_READ | PROT_WRITE) != 0)
    return false;
  mappings_.emplace(ptr, bytes);
  used_ += bytes;
  mapped_ += bytes;
  ++maps_;
  return true;
}

void fake_backend::unmap(std::uintptr_t ptr, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  const auto it = mappings_.find(ptr);
  if (it == mappings_.end() || it->second != bytes) {
    ++bad_deallocations_;
    return;
  }
  if (!fake_addresses_) {
    madvise(reinterpret_cast<void*>(ptr), bytes, MADV_DONTNEED);
    mprotect(reinterpret_cast<void*>(ptr), bytes, PROT_NONE);
  }
  mappings_.erase(it);
  used_ -= bytes;
  mapped_ -= bytes;
}

std::size_t fake_backend::maps() const {
  std::lock_guard lock(mutex_);
  return maps_;
}

std::size_t fake_backend::mapped() const {
  std::lock_guard lock(mutex_);
  return mapped_;
}

}  // namespace gpu_basics

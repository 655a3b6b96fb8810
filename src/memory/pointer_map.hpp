// The caching allocator's map of live allocations by address (private to the memory module).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpu_basics::allocator_detail {

struct block;

/// Live allocations by address: open addressing with linear probing and backward-shift
/// deletion over a power-of-two table (no per-insert allocation, no modulo by a prime).
class pointer_map {
 public:
  pointer_map() : slots_(1024) {}
  [[nodiscard]] block* find(std::uintptr_t key) const noexcept {
    for (std::size_t i = index(key);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }
  void insert(std::uintptr_t key, block* value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    place(key, value);
    ++size_;
  }
  block* erase(std::uintptr_t key) noexcept {
    std::size_t i = index(key);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return nullptr;
    }
    block* v = slots_[i].value;
    // Shift later entries of the probe run back so lookups never meet a hole early.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].key == 0) break;
      const std::size_t home = index(slots_[j].key);
      if (((j - home) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return v;
  }

 private:
  struct slot {
    std::uintptr_t key = 0;
    block* value = nullptr;
  };
  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  [[nodiscard]] std::size_t index(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }
  void place(std::uintptr_t key, block* value) noexcept {
    std::size_t i = index(key);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = {key, value};
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const slot& s : old)
      if (s.key) place(s.key, s.value);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace gpu_basics::allocator_detail

// A host-memory allocator_backend with a configurable capacity, for testing the allocators'
// logic without a GPU. Events complete only when the test says so (per stream or all at once),
// so stream-ordered reuse can be checked deterministically. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "gpu_basics/memory/backend.hpp"

namespace gpu_basics {

/// Where made-up addresses put each new allocation (fake_backend with fake addresses): above
/// the last one, below it, or at a seeded random place. Only their order matters to an allocator
/// that breaks ties between free blocks of one size by address, as PyTorch's does, so replaying
/// one trace under several orders shows how much an outcome depends on where the CUDA driver
/// happens to place segments.
enum class address_order { ascending, descending, shuffled };

/// An order and, for `shuffled`, its seed.
struct address_placement {
  address_order order = address_order::ascending;
  std::uint64_t seed = 0;
  /// "ascending", "descending", "shuffled (seed 3)".
  [[nodiscard]] std::string name() const;
  bool operator==(const address_placement&) const = default;
};

class fake_backend;

/// The simulated device that replays and advice run the allocator on: a fake_backend of 64 TiB
/// of made-up addresses (nothing is touched, so no replay is bounded by the host's memory), with
/// virtual memory for expandable segments and new segments placed as `placement` says.
[[nodiscard]] std::shared_ptr<fake_backend> simulated_device(address_placement placement = {});

class fake_backend final : public allocator_backend {
 public:
  /// `capacity` bytes in all; addresses are real host memory unless `fake_addresses` is set, in
  /// which case they are made up (for capacities larger than the host, never dereference them).
  explicit fake_backend(std::size_t capacity, bool fake_addresses = false);
  /// With made-up addresses, places later allocations as `p` says (ascending by default);
  /// reserve_address() ranges stay ascending. Nothing with real addresses.
  void set_address_placement(address_placement p);
  /// Frees what is still allocated, and every event.
  ~fake_backend() override;

  /// `bytes` of the capacity; nullptr for 0 bytes, when they do not fit, or while
  /// fail_next_allocations() counts down.
  void* allocate(std::size_t bytes) override;
  /// Gives `bytes` back; a pointer or size it did not hand out is counted in
  /// bad_deallocations() instead.
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// An event on `s`, done at complete_stream(s) or synchronize().
  event_handle record_event(stream_handle s) override;
  /// Whether `e` has been completed.
  bool event_done(event_handle e) override;
  /// Forgets `e`.
  void release_event(event_handle e) noexcept override;
  /// Completes every event.
  void synchronize() override;
  /// {capacity - used, capacity}.
  std::pair<std::size_t, std::size_t> memory_info() override;
  /// "fake".
  const char* name() const noexcept override { return "fake"; }

  /// Virtual memory as the CUDA driver offers it: with real addresses, reserve_address is an
  /// inaccessible mmap that map() makes readable and writable page by page and unmap() gives
  /// back to the kernel; with made-up addresses only the bookkeeping is kept. Mapped bytes count
  /// against the capacity like allocations.
  bool supports_virtual_memory() const noexcept override { return virtual_memory_; }
  std::uintptr_t reserve_address(std::size_t bytes) override;
  void release_address(std::uintptr_t base, std::size_t bytes) noexcept override;
  bool map(std::uintptr_t ptr, std::size_t bytes) override;
  void unmap(std::uintptr_t ptr, std::size_t bytes) noexcept override;
  /// Turns virtual memory off, to test the fallback to plain segments.
  void disable_virtual_memory() noexcept { virtual_memory_ = false; }
  /// map() calls that succeeded.
  [[nodiscard]] std::size_t maps() const;
  /// Bytes mapped now (part of used()).
  [[nodiscard]] std::size_t mapped() const;

  /// Completes every event recorded so far on `s` (the stream's work "ran").
  void complete_stream(stream_handle s);
  /// Makes the next `n` allocations fail (to test the retry path).
  void fail_next_allocations(int n);

  /// Shuffled placement: the slots its live allocations hold (a freed one is free again).
  [[nodiscard]] std::size_t shuffled_slots() const;
  /// Bytes handed out and not yet given back.
  [[nodiscard]] std::size_t used() const;
  /// allocate() calls that succeeded.
  [[nodiscard]] std::size_t allocations() const;
  /// Events recorded and not yet released.
  [[nodiscard]] std::size_t live_events() const;
  /// deallocate() calls for a pointer or size this backend did not hand out (should stay 0).
  [[nodiscard]] std::size_t bad_deallocations() const;

 private:
  struct event {
    stream_handle stream;
    bool done;
  };
  mutable std::mutex mutex_;
  std::size_t capacity_;
  bool fake_addresses_;
  std::size_t used_ = 0;
  std::size_t allocations_ = 0;
  std::size_t bad_deallocations_ = 0;
  // Shuffled placement: kSlots slots of kSlot bytes from kSlotBase; descending addresses grow
  // down from kSlotBase, ascending ones up from next_fake_'s start.
  static constexpr std::uintptr_t kSlotBase = std::uintptr_t{1} << 62;
  static constexpr std::uintptr_t kSlot = std::uintptr_t{1} << 40;
  static constexpr std::uintptr_t kSlots = std::uintptr_t{1} << 20;
  std::uintptr_t next_fake_ = 0x100000000000ull;  // ascending, and reserve_address()
  std::uintptr_t next_down_ = kSlotBase;          // descending: the lowest address so far
  address_placement placement_;
  std::uint64_t rng_ = 0;           // shuffled: xorshift state
  std::set<std::uintptr_t> slots_;  // shuffled: the slots of live allocations
  int fail_next_ = 0;
  std::map<void*, std::size_t> live_;
  std::set<event*> events_;
  bool virtual_memory_ = true;
  std::size_t maps_ = 0;
  std::size_t mapped_ = 0;
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  std::map<std::uintptr_t, std::size_t> mappings_;      // ptr -> bytes
};

}  // namespace gpu_basics

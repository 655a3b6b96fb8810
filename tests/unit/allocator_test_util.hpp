// What the caching allocator's stress tests share: a shadow of the live blocks and the invariants
// its statistics must keep against it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

namespace gpu_basics::test_util {

/// A live block as the test saw it handed out.
struct live_block {
  std::size_t rounded;    // the block's size as the allocator reports it
  std::size_t requested;  // the size asked for
  stream_handle stream = 0;
};
/// Live blocks by address.
using live_blocks = std::map<std::uintptr_t, live_block>;

/// The invariants every state keeps: no two live blocks overlap, the counters add up to the live
/// blocks, reserved bytes are the backend's, and reserved = active + cached free. Call it through
/// ASSERT_NO_FATAL_FAILURE.
inline void check_invariants(const caching_allocator& a, const fake_backend& be,
                             const live_blocks& live) {
  std::int64_t rounded = 0, requested = 0;
  std::uintptr_t end = 0;
  for (const auto& [p, b] : live) {
    ASSERT_GE(p, end) << "two live blocks overlap";
    end = p + b.rounded;
    rounded += static_cast<std::int64_t>(b.rounded);
    requested += static_cast<std::int64_t>(b.requested);
  }
  const auto s = a.stats();
  ASSERT_EQ(s.allocated_bytes.current, rounded);
  ASSERT_EQ(s.requested_bytes.current, requested);
  ASSERT_EQ(s.allocation_count.current, static_cast<std::int64_t>(live.size()));
  ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.current), be.used());  // bytes are conserved
  ASSERT_GE(s.active_bytes.current, s.allocated_bytes.current);
  ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.current),
            static_cast<std::size_t>(s.active_bytes.current) + s.cached_free_bytes);
  ASSERT_GE(s.allocated_bytes.peak, s.allocated_bytes.current);
}

}  // namespace gpu_basics::test_util

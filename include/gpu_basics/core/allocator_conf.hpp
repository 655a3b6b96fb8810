// The policy knobs of a PyTorch-style caching allocator, with PyTorch's names and meanings, and
// PYTORCH_CUDA_ALLOC_CONF's syntax for them: "key:value,key:value", where
// roundup_power2_divisions also takes a list "[256:1,512:2,>:4]" (interval start in MiB:
// divisions). Host-only and in core, so the configuration can check a conf string where it is
// written (memory.allocator.conf) and the allocator can apply it (memory/caching_allocator.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpu_basics {

/// Power-of-two intervals of roundup_power2_divisions: [0, 2 MiB), [2, 4 MiB), ... [32 GiB, inf).
inline constexpr std::size_t kRoundupIntervals = 16;

struct allocator_policy {
  /// PyTorch's max_split_size_mb, in bytes: blocks at least this large are never split for
  /// requests below it, and requests below it never take them; a request at least this large
  /// takes a cached block only if it wastes less than 20 MiB. SIZE_MAX: no limit.
  std::size_t max_split_size = SIZE_MAX;
  /// PyTorch's roundup_power2_divisions: a request in the power-of-two interval i (index 0 up to
  /// 2 MiB, then one per doubling, the last from 32 GiB) is rounded up to the next of
  /// divisions[i] equal steps of that interval; 0 or 1 keep plain 512-byte rounding.
  std::array<std::size_t, kRoundupIntervals> roundup_power2_divisions{};
  /// PyTorch's garbage_collection_threshold (0 = off): with a reserved limit, once reserved
  /// passes this fraction of it, whole cached blocks that have been free longest are returned
  /// before a new segment is requested.
  double garbage_collection_threshold = 0;
  /// PyTorch's expandable_segments: one growable virtual range per stream and pool.
  bool expandable_segments = false;

  bool operator==(const allocator_policy&) const = default;
};

/// The policy from a conf string in PYTORCH_CUDA_ALLOC_CONF's syntax, applied over `base`:
/// "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],
/// garbage_collection_threshold:0.6". Keys of PyTorch that do not change this allocator's policy
/// (backend:native, release_lock_on_cudamalloc, pinned_*) are accepted and ignored.
/// @throws logic_error naming the bad part ("allocator conf: max_split_size_mb: expected an
/// integer > 20 (MiB), got 'x'") for an unknown key, a bad value or bad syntax.
[[nodiscard]] allocator_policy parse_allocator_policy(std::string_view conf,
                                                      allocator_policy base = {});
/// The conf string of what differs from the defaults (empty for defaults), in the syntax
/// parse_allocator_policy reads.
[[nodiscard]] std::string to_conf_string(const allocator_policy& p);

}  // namespace gpu_basics

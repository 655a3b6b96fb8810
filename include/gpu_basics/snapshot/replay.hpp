// Replaying an allocation trace through the caching allocator's host-only logic on the fake
// backend: what would a policy (allocator_options) have reserved for the same requests? Used by
// `gpu-basics replay` (traces from PyTorch memory snapshots) and by the allocator benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"

namespace gpu_basics {

/// One request of a trace. `id` names the block (the address it had when recorded): a free
/// refers to the alloc with the same id before it.
struct replay_event {
  enum class op : std::uint8_t { alloc, free };
  op kind = op::alloc;
  std::uint64_t id = 0;
  std::size_t bytes = 0;  // requested size (allocs; ignored for frees)
  stream_handle stream = 0;
};

struct replay_result {
  std::size_t events = 0;
  std::size_t peak_reserved = 0;
  std::size_t peak_allocated = 0;        // rounded block sizes, as the allocator counts them
  std::size_t peak_requested = 0;        // the trace's own peak of live requested bytes
  std::int64_t backend_allocations = 0;  // segments created, or pages mapped (expandable)
  double fragmentation_at_peak = 0;      // 1 - largest free block / free bytes, at peak reserved
  double seconds = 0;                    // wall time of the replay loop alone
  /// peak_reserved / peak_requested (0 for an empty trace).
  [[nodiscard]] double reserved_ratio() const noexcept {
    return peak_requested ? static_cast<double>(peak_reserved) / static_cast<double>(peak_requested)
                          : 0;
  }
};

/// Replays `trace` on a fresh allocator with `o` over a fake backend of 64 TiB (made-up
/// addresses: nothing is touched). Frees of ids never allocated in the trace are skipped;
/// allocations still live at the end stay live.
/// @throws format_error when the live requested bytes overflow 64 bits (peak_requested());
/// interrupted on Ctrl-C / SIGTERM (checked every 64Ki events).
[[nodiscard]] replay_result replay_trace(const std::vector<replay_event>& trace,
                                         const allocator_options& o);

/// A trace made ready for many replays (a policy sweep): each event's block as a dense index, and
/// the trace's peak_requested(), worked out once rather than in every replay.
struct prepared_trace {
  const std::vector<replay_event>* trace = nullptr;  // not owned: it must outlive this
  std::vector<std::uint32_t> block;                  // per event: its id's index, 0 .. blocks - 1
  std::size_t blocks = 0;
  std::size_t peak_requested = 0;
};

/// `trace` prepared for replay_trace(const prepared_trace&, ...).
/// @throws format_error as peak_requested(); logic_error for more than 2^32 - 1 distinct ids;
/// interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] prepared_trace prepare_trace(const std::vector<replay_event>& trace);

/// replay_trace() of a prepared trace: the same result, without the per-replay bookkeeping.
/// Replays of one prepared trace may run on several threads at once.
/// @throws interrupted on Ctrl-C / SIGTERM (checked every 64Ki events).
[[nodiscard]] replay_result replay_trace(const prepared_trace& trace, const allocator_options& o);

/// The trace's own peak of live requested bytes (an id allocated again without a free replaces
/// its block; frees of unknown ids are skipped), as replay_trace() counts it.
/// @throws format_error when the live bytes overflow 64 bits.
[[nodiscard]] std::size_t peak_requested(const std::vector<replay_event>& trace);

/// Synthetic traces of the benchmarks (fixed seeds): `mixed`: log-uniform sizes 512 B - 32 MiB,
/// at most 256 live blocks; `transformer`: activations of a layered forward pass kept for the
/// backward pass and freed in reverse, with varying batch sizes.
[[nodiscard]] std::vector<replay_event> mixed_trace(std::size_t ops = 4096,
                                                    std::uint64_t seed = 42);
[[nodiscard]] std::vector<replay_event> transformer_trace(int steps = 40, std::uint64_t seed = 7);

}  // namespace gpu_basics

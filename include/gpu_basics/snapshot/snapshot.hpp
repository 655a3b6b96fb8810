// PyTorch memory snapshots, both ways. write_snapshot() saves a caching_allocator's segments and
// history in the format of torch.cuda.memory._dump_snapshot, so https://pytorch.org/memory_viz
// draws our allocator as it draws PyTorch's. read_torch_snapshot() loads a snapshot PyTorch
// wrote (recorded with torch.cuda.memory._record_memory_history) and turns its trace into a
// replay_trace() input, so other allocator policies can be tried on a real workload's requests
// without a GPU (`gpu-basics replay`). Host-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/snapshot/replay.hpp"

namespace gpu_basics {

/// Writes a snapshot of `segments` (caching_allocator::segments()) and `history`
/// (caching_allocator::history()) for `device`: a dict with "segments", "device_traces" (one list
/// per device up to `device`, ours last), "allocator_settings" (from `options`) and
/// "external_annotations" (empty), as PyTorch's _snapshot() has them. History kinds map to
/// PyTorch's actions: free becomes free_requested, followed by free_completed when the block was
/// not awaiting other streams (PyTorch records both then); the others keep their names. Times
/// are in µs; frames are empty lists.
void write_snapshot(std::ostream& out, const std::vector<segment_view>& segments,
                    const std::vector<history_event>& history, int device = 0,
                    const allocator_options& options = {});
/// write_snapshot() into `path` through a temporary file renamed into place (nothing is left on
/// failure).
/// @throws io_error when the file cannot be written.
void write_snapshot(const std::string& path, const std::vector<segment_view>& segments,
                    const std::vector<history_event>& history, int device = 0,
                    const allocator_options& options = {});

/// One block of a snapshot's segment.
struct torch_block {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  std::string state;  // "active_allocated", "active_pending_free", "inactive"
};

/// One segment of a snapshot, as it was when the snapshot was taken.
struct torch_segment {
  int device = 0;
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t allocated_size = 0;
  std::uint64_t active_size = 0;
  std::uint64_t requested_size = 0;
  std::int64_t stream = 0;
  bool small = false;  // segment_type "small"
  bool expandable = false;
  std::vector<torch_block> blocks;
};

enum class torch_action {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  oom,
  snapshot,
  other  // an action this build does not know (kept, ignored)
};

/// One entry of a device trace.
struct torch_trace_event {
  torch_action action = torch_action::other;
  std::uint64_t addr = 0;  // device_free for oom
  std::uint64_t size = 0;  // requested bytes for alloc/free, segment bytes for segment_*
  std::int64_t stream = 0;
  std::int64_t time_us = 0;
};

/// A snapshot as read: segments at the end, and each device's trace (oldest first).
struct torch_snapshot {
  std::vector<torch_segment> segments;
  std::vector<std::vector<torch_trace_event>> device_traces;
  /// allocator_settings.PYTORCH_CUDA_ALLOC_CONF, when the snapshot has it.
  std::optional<std::string> alloc_conf;

  /// The device with the longest trace (the first of equals).
  [[nodiscard]] int busiest_device() const noexcept;
};

/// Reads a snapshot from its pickle bytes; `name` (the file) starts every message.
/// @throws format_error in one line naming `name` and the problem: not a pickle, truncated, a
/// pickle that is not a snapshot (not a dict, no "segments"), no "device_traces" or only empty
/// traces (recorded without _record_memory_history: the message says how to record one).
[[nodiscard]] torch_snapshot parse_torch_snapshot(std::string_view bytes, std::string_view name);
/// parse_torch_snapshot() of the file at `path`.
/// @throws format_error as parse_torch_snapshot(), and for a file that cannot be read.
[[nodiscard]] torch_snapshot read_torch_snapshot(const std::string& path);

/// `device`'s trace as replay_trace() input, ids being addresses. Blocks alive when recording
/// began are rebuilt: an address freed in the trace before any alloc of it gets an alloc at the
/// start (size from the free event, else from the final segments' block there), and a block
/// still allocated at the end with no alloc in the trace is allocated at the start. A free is
/// its free_requested (free_completed only where its free_requested is missing).
/// `rebuilt`, when given, receives the number of allocs added at the start.
[[nodiscard]] std::vector<replay_event> to_replay_trace(const torch_snapshot& s, int device,
                                                        std::size_t* rebuilt = nullptr);

/// A one-device snapshot whose trace is `trace` (ids as addresses, a free as free_requested on
/// its alloc's stream and with its size): to_replay_trace()'s inverse, for tests and benchmarks.
[[nodiscard]] torch_snapshot torch_snapshot_of(const std::vector<replay_event>& trace);

/// What PyTorch itself recorded on one device, from the segment events of its trace.
struct recorded_figures {
  std::uint64_t reserved_at_start = 0;  // final reserved - the trace's net segment change
  std::uint64_t reserved_at_end = 0;    // the device's segments' total_size
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_requested = 0;      // live requested bytes (blocks alive at start included)
  std::int64_t backend_allocations = 0;  // segment_alloc + segment_map events
  std::size_t events = 0;                // trace entries
  std::size_t ooms = 0;
};
/// The recorded figures of `device` (blocks alive at the start as to_replay_trace() rebuilds
/// them).
/// @throws format_error when segment sizes add up beyond 64 bits (never wrapped).
[[nodiscard]] recorded_figures recorded(const torch_snapshot& s, int device);
/// The same, with `device`'s trace as to_replay_trace() made it already.
[[nodiscard]] recorded_figures recorded(const torch_snapshot& s, int device,
                                        const std::vector<replay_event>& replayed);
/// The same, that trace prepared already (its peak_requested known).
/// @throws format_error when segment sizes add up beyond 64 bits.
[[nodiscard]] recorded_figures recorded(const torch_snapshot& s, int device,
                                        const prepared_trace& replayed);

}  // namespace gpu_basics

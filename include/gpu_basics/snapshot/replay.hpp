// The replay engine: an allocation trace run through the caching allocator's host-only logic on a
// simulated device (memory/fake_backend.hpp): what would a policy (allocator_options) have
// reserved for the same requests? One engine, trace_replayer, under every use: replay_trace()
// (`gpu-basics replay`, the policy sweep, the allocator benchmarks) and advise's replays under a
// limit, its usage curve and its stranded split (snapshot/advise.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

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

/// Replays `trace` on a fresh allocator with `o` on a simulated device (simulated_device()). Frees
/// of ids never allocated in the trace are skipped; allocations still live at the end stay live.
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

/// The most live requested bytes a trace may hold at once: 4 TiB, beyond any GPU's memory.
inline constexpr std::size_t kMaxReplayBytes = std::size_t{1} << 42;

/// `trace` prepared for replay_trace(const prepared_trace&, ...).
/// @throws format_error as peak_requested() (and for live bytes beyond kMaxReplayBytes);
/// logic_error for more than 2^32 - 1 distinct ids;
/// interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] prepared_trace prepare_trace(const std::vector<replay_event>& trace);

/// replay_trace() of a prepared trace: the same result, without the per-replay bookkeeping.
/// Replays of one prepared trace may run on several threads at once.
/// @throws interrupted on Ctrl-C / SIGTERM (checked every 64Ki events).
[[nodiscard]] replay_result replay_trace(const prepared_trace& trace, const allocator_options& o);

/// The options a replay runs the allocator with: `o` without a history, and a deferred page
/// release made eager (a trace has no GPU timing: pages are released as if the GPU had caught
/// up, which is what deferred comes to once its events are done).
[[nodiscard]] allocator_options replay_options(allocator_options o);

/// One replay in progress: an allocator (under replay_options()) on its own simulated device,
/// the trace's live blocks, and the requested bytes live as the trace goes (and, when asked, the
/// allocated ones). The hooks of a replay (a peak, a limit, a curve, a look at the cache at one
/// event) are the caller's loop around step().
class trace_replayer {
 public:
  /// `count_allocated`: keep allocated() (one block-size lookup per allocation).
  trace_replayer(const prepared_trace& trace, const allocator_options& o,
                 address_placement placement = {}, bool count_allocated = false);
  trace_replayer(const trace_replayer&) = delete;
  trace_replayer& operator=(const trace_replayer&) = delete;
  /// Returns the blocks still live (the trace's leaks included).
  ~trace_replayer();

  /// Applies the trace's `i`th event (Ctrl-C checked every 64Ki events): an alloc's block, else
  /// nullptr. An id allocated again without a free leaks its first block, as recorded; a free of
  /// an id not live does nothing.
  /// @throws out_of_memory as the allocator does (under a reserved limit).
  void* step(std::size_t i);

  [[nodiscard]] const replay_event& event(std::size_t i) const noexcept {
    return (*trace_.trace)[i];
  }
  [[nodiscard]] std::size_t events() const noexcept { return trace_.trace->size(); }
  /// Bytes the allocator holds from the device now (reserved).
  [[nodiscard]] std::size_t reserved() const { return device_->used(); }
  /// Rounded block sizes live now, leaked ones included (0 unless count_allocated).
  [[nodiscard]] std::size_t allocated() const noexcept { return allocated_; }
  /// Requested bytes live now, leaked ones included.
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  [[nodiscard]] caching_allocator& allocator() noexcept { return alloc_; }
  [[nodiscard]] const allocator_options& options() const noexcept { return opts_; }

 private:
  struct live_block {
    void* ptr = nullptr;
    std::size_t size = 0;
    std::size_t requested = 0;
  };
  const prepared_trace& trace_;
  allocator_options opts_;
  std::shared_ptr<fake_backend> device_;
  caching_allocator alloc_;
  std::vector<live_block> live_;  // by the trace's dense block index
  bool count_allocated_;
  std::size_t allocated_ = 0, requested_ = 0;
};

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

// A policy sweep over a PyTorch memory snapshot: its allocation trace replayed through the
// caching allocator under several policies (PYTORCH_CUDA_ALLOC_CONF strings), beside what PyTorch
// itself recorded, with the table and JSON that show it. Host-only: no GPU, no CUDA headers.
// `gpu-basics replay` prints it; advice on a snapshot builds on it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

namespace gpu_basics {

/// A policy as given (a PYTORCH_CUDA_ALLOC_CONF string, "" for the defaults) and its options,
/// parsed once where it enters (the command line, the built-in lists) and carried as such.
struct replay_policy {
  std::string conf;
  allocator_options options;
  bool operator==(const replay_policy&) const = default;
};

/// A conf as tables show it: "(defaults)" for "", else escaped (a --policy or a snapshot's conf
/// may hold anything).
[[nodiscard]] std::string policy_label(const std::string& conf);

/// What a list does with a user policy equal to one before it: refuse it (replay: the user named
/// it twice) or skip it (advise: it was searched already).
enum class repeated_policy { refuse, skip };

/// `builtin` (trusted confs), then `user`'s (--policy strings, checked as parse_user_policy
/// does), each parsed once. A user policy that sets per_process_memory_fraction gets the reserved
/// limit that fraction sets on a device of `device_memory` bytes.
/// @throws logic_error for a blank or unreadable user conf, one with a fraction but no
/// `device_memory`, or under `refuse` one that is the same policy as one before it.
[[nodiscard]] std::vector<replay_policy> policy_list(
    const std::vector<std::string>& builtin, const std::vector<std::string>& user,
    repeated_policy repeated, std::optional<std::size_t> device_memory = std::nullopt);

/// A replay without a limit: its result, or the out-of-memory message that ended it (a policy
/// with a per_process_memory_fraction).
struct policy_run {
  std::optional<replay_result> result;
  std::string failure;
};

/// The sweep: one replay per policy.
struct policy_sweep {
  std::vector<policy_run> runs;  // as the policies
};

/// The one schedule of policy replays (replay, advise): every policy replayed as PyTorch would
/// run it, on `pool`. garbage_collection_threshold acts only under a reserved limit, as PyTorch's
/// acts only under a memory fraction: a policy without one (per_process_memory_fraction) replays
/// as the same policy without the threshold. `then(i, run)`, where given, runs on the same thread
/// right after policy i's replay (further work per policy).
/// @throws interrupted on Ctrl-C / SIGTERM; what `then` throws.
[[nodiscard]] policy_sweep sweep_policies(
    const prepared_trace& trace, const std::vector<replay_policy>& policies, thread_pool& pool,
    const std::function<void(std::size_t, const policy_run&)>& then = {});

/// A device's trace of a snapshot, ready for many replays: its events, their preparation and
/// what PyTorch recorded. Not copyable: `prepared` points into `events`.
struct snapshot_trace {
  /// @throws format_error naming `file` for sizes beyond 64 bits (the segments' sizes reported
  /// before the live bytes', as recorded() does); interrupted on Ctrl-C / SIGTERM.
  snapshot_trace(const torch_snapshot& s, const std::string& file, int device);
  snapshot_trace(const snapshot_trace&) = delete;
  snapshot_trace& operator=(const snapshot_trace&) = delete;

  std::vector<replay_event> events;
  prepared_trace prepared;
  recorded_figures recorded;
  std::size_t rebuilt = 0;  // allocs added for blocks alive when recording began
};

/// One policy's replay: its result, or why it could not finish (out of memory under a limit).
struct policy_replay {
  std::string conf;  // as given ("" = the defaults)
  std::optional<replay_result> result;
  std::string failure;
};

struct replay_report {
  std::string file;
  int device = 0;
  std::size_t trace_events = 0;   // the device's trace entries
  std::size_t replay_events = 0;  // allocs and frees replayed per policy
  std::size_t rebuilt = 0;        // allocs added for blocks alive when recording began
  recorded_figures recorded;
  std::optional<std::string> recorded_conf;  // the snapshot's PYTORCH_CUDA_ALLOC_CONF
  std::optional<std::size_t> device_memory;  // --device-memory, for per_process_memory_fraction
  std::vector<policy_replay> policies;
  double seconds = 0;  // all replays, added up (they run in parallel)
  [[nodiscard]] double events_per_second() const noexcept;
  /// The conf string with the lowest peak reserved (the first of equals); nullopt if none ran.
  [[nodiscard]] std::optional<std::string> best() const;
};

/// A --policy string's options.
/// @throws logic_error for a blank string or one parse_allocator_options rejects.
[[nodiscard]] allocator_options parse_user_policy(const std::string& conf);

/// The built-in policies (defaults, max_split_size_mb 64-512, roundup_power2_divisions,
/// expandable_segments), then `user`'s (per_process_memory_fraction on a device of
/// `device_memory` bytes). garbage_collection_threshold is not among the built-in ones: without a
/// memory fraction it changes nothing.
/// @throws logic_error for a user conf that is blank, that parse_allocator_options rejects, that
/// sets a fraction without `device_memory`, or that is the same policy as one before it.
[[nodiscard]] std::vector<replay_policy> replay_policies(
    const std::vector<std::string>& user, std::optional<std::size_t> device_memory = std::nullopt);

/// Replays `device`'s trace of `s` under every policy of `policies` (sweep_policies()), on
/// `threads` threads at most (0: one per core, or 1 when the whole sweep is under a million
/// events, where starting threads is not worth it). Each replay is independent: the report is
/// the same however many run at once.
/// @throws format_error naming `file` for sizes beyond 64 bits; interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] replay_report replay_snapshot(const torch_snapshot& s, const std::string& file,
                                            int device, const std::vector<replay_policy>& policies,
                                            unsigned threads = 0);

/// Whether `conf` sets garbage_collection_threshold without per_process_memory_fraction (the
/// threshold then changes nothing); false for a conf that cannot be read.
[[nodiscard]] bool collects_without_fraction(const std::string& conf) noexcept;

/// The table: one row per policy, then "PyTorch (recorded)".
[[nodiscard]] presentation::table replay_table(const replay_report& r);
/// The report as JSON (sizes in bytes, null where there is no value).
[[nodiscard]] nlohmann::json to_json(const replay_report& r);

}  // namespace gpu_basics

// A policy sweep over a PyTorch memory snapshot: its allocation trace replayed through the
// caching allocator under several policies (PYTORCH_CUDA_ALLOC_CONF strings), beside what PyTorch
// itself recorded, with the table and JSON that show it. Host-only: no GPU, no CUDA headers.
// `gpu-basics replay` prints it; advice on a snapshot builds on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

namespace gpu_basics {

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
  std::uint64_t gc_reserved_limit = 0;  // reserved limit of garbage_collection_threshold policies
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
/// expandable_segments, garbage_collection_threshold), then `user`'s.
/// @throws logic_error for a user conf that is blank, that parse_allocator_options rejects, or that
/// is the same policy as one before it (built-in or given).
[[nodiscard]] std::vector<std::string> replay_policies(const std::vector<std::string>& user);

/// Replays `device`'s trace of `s` under every conf of `confs`, the policies on a pool of threads
/// (each replay is independent: the report is the same however many run at once).
/// @throws logic_error for a conf string parse_allocator_options rejects; format_error naming
/// `file` for sizes beyond 64 bits; interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] replay_report replay_snapshot(const torch_snapshot& s, const std::string& file,
                                            int device, const std::vector<std::string>& confs);
/// The same on `threads` threads at most (0: one per core, or 1 when the whole sweep is under a
/// million events, where starting threads is not worth it).
[[nodiscard]] replay_report replay_snapshot(const torch_snapshot& s, const std::string& file,
                                            int device, const std::vector<std::string>& confs,
                                            unsigned threads);

/// The table: one row per policy, then "PyTorch (recorded)".
[[nodiscard]] presentation::table replay_table(const replay_report& r);
/// The report as JSON (sizes in bytes, null where there is no value).
[[nodiscard]] nlohmann::json to_json(const replay_report& r);

}  // namespace gpu_basics

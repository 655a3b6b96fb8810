// Advice from a memory snapshot's allocation trace, replayed through the caching allocator on a
// simulated device (host-only): will it fit under a reserved limit (PyTorch's
// set_per_process_memory_fraction), with PyTorch's out-of-memory path (free the cache, retry);
// the smallest limit that fits, bisected to one 2 MiB page; a search over the policy space
// (max_split_size_mb, roundup_power2_divisions, expandable_segments,
// garbage_collection_threshold and their combinations) for the policy to use; and the bytes
// reserved but free at peak, split by the reason no request could use them. `gpu-basics advise`
// prints it, writes it as JSON and draws it (report/advice.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

namespace gpu_basics {

/// The granularity of limits advise proposes: one large-pool page, as the allocator has it.
inline constexpr std::size_t kAdvicePage = kLargePageBytes;

/// Why bytes reserved at a moment are free and still not used by the request being served then.
enum class stranded_cause {
  other_stream,      // free, but cached for another stream (a stream's blocks serve only it)
  other_pool,        // free in the other pool: small (<= 1 MiB requests) vs large segments
  expandable_pages,  // free pages an expandable range keeps mapped, too fragmented to serve it
  segment_rest,      // the unused rest of the segment just created (2 MiB / 20 MiB granularity)
  max_split,         // large enough, but max_split_size_mb forbids splitting or taking it
  too_small,         // smaller than the request: fragments between live blocks
  unexplained,       // none of the above (the allocator would have used it; expected 0)
};
/// "other stream", "other pool", ...: as tables and JSON name it.
[[nodiscard]] std::string_view to_string(stranded_cause c) noexcept;

/// Bytes of one cause (other_stream: of one stream).
struct stranded_part {
  stranded_cause cause = stranded_cause::unexplained;
  std::size_t bytes = 0;
  stream_handle stream = 0;  // other_stream only
};

/// The reserved-but-free bytes when reserved first reached its peak, split by cause: every free
/// byte in exactly one part, so the parts sum to reserved - allocated. The request is the
/// allocation that raised reserved to the peak (it needed a new segment, so no free block could
/// serve it). Rounding waste (allocated - requested) is inside allocated blocks, beside the split.
struct stranded_split {
  std::size_t event = 0;  // index in the replayed trace
  std::size_t request_bytes = 0;
  std::size_t rounded_bytes = 0;
  stream_handle stream = 0;
  bool small_pool = false;
  std::size_t reserved = 0;
  std::size_t allocated = 0;         // rounded block sizes
  std::size_t requested = 0;         // live bytes as asked
  std::vector<stranded_part> parts;  // by cause, then stream; parts with 0 bytes left out
  /// The request's Python frames ("file:line in function", innermost first), where the
  /// snapshot has them and attach_frames() read them.
  std::vector<std::string> frames;
  [[nodiscard]] std::size_t free_bytes() const noexcept { return reserved - allocated; }
  [[nodiscard]] std::size_t rounding_bytes() const noexcept { return allocated - requested; }
  /// The bytes of `c` (all streams).
  [[nodiscard]] std::size_t bytes_of(stranded_cause c) const noexcept;
};

/// An event that grew reserved memory beyond what the live blocks needed: reserved after it less
/// the larger of reserved before it and allocated after it (a new segment taken while enough
/// bytes were free in all, but not where the request could use them).
struct growth_event {
  std::size_t event = 0;  // index in the replayed trace
  std::size_t request_bytes = 0;
  std::size_t grew_bytes = 0;                          // reserved after less before
  std::size_t excess_bytes = 0;                        // beyond what live blocks needed
  std::size_t free_before = 0;                         // reserved less allocated before it
  stranded_cause cause = stranded_cause::unexplained;  // the largest part of the free bytes then
  stream_handle stream = 0;
};

/// The moments of a replay that explain its peak.
struct replay_moments {
  std::size_t peak_reserved_event = 0;   // the first event at peak reserved
  std::size_t peak_allocated_event = 0;  // the first event at peak allocated
  stranded_split at_peak_reserved;
  stranded_split at_peak_allocated;
  std::vector<growth_event> growth;  // the largest, up to peak reserved, in event order
  std::size_t growth_total = 0;      // every growth beyond need up to peak reserved, summed
};

/// Where a replay under a limit ran out of memory (after freeing the cache and retrying).
struct oom_point {
  std::size_t event = 0;  // index in the replayed trace
  std::size_t request_bytes = 0;
  stream_handle stream = 0;
  std::size_t allocated = 0;  // after the cache was freed, as PyTorch's message reports them
  std::size_t reserved = 0;
  std::size_t largest_free = 0;
  std::vector<std::string> frames;  // the allocation's Python frames, where the snapshot has them
};

/// A replay under a reserved limit: it fits (with its peak reserved) or runs out of memory.
struct fit_outcome {
  std::size_t limit = 0;
  std::size_t peak_reserved = 0;  // up to the OOM, if any
  std::optional<oom_point> oom;
  [[nodiscard]] bool fits() const noexcept { return !oom; }
  [[nodiscard]] std::size_t headroom() const noexcept {
    return fits() && limit > peak_reserved ? limit - peak_reserved : 0;
  }
};

/// Reserved and allocated over the trace, at most a few thousand points (each the maximum of
/// its stretch of events).
struct usage_curve {
  std::vector<std::size_t> event;
  std::vector<std::size_t> reserved;
  std::vector<std::size_t> allocated;
};

/// One searched policy.
struct policy_outcome {
  std::string conf;                     // "" = the defaults
  int knobs = 0;                        // keys set (simpler = fewer)
  std::optional<replay_result> result;  // without a limit, as PyTorch runs it without a fraction
  std::string failure;                  // when result is empty
  std::vector<fit_outcome> fits;        // one per advice::fit_limits entry
};

/// What advise shows in detail for one policy (the defaults and the recommendation).
struct policy_detail {
  std::size_t index = 0;  // into advice::policies
  /// The smallest limit (a multiple of kAdvicePage) that fits under every placement of
  /// advise_placements(): at least the largest of smallest_by_placement, raised a page at a time
  /// while one placement does not fit it.
  std::size_t smallest_limit = 0;
  /// Per placement (advise_placements()' order), the smallest limit it fits; empty in advice
  /// saved before placements were replayed.
  std::vector<std::size_t> smallest_by_placement;
  fit_outcome below;  // one page below smallest_limit, under the placement that needed it most
  /// Per placement, the peak reserved without a limit (under line_limit for a recommendation
  /// whose line sets one): where the driver places segments moves the peak too.
  std::vector<std::size_t> peak_by_placement;
  /// Per advice::fit_limits entry, how many of the placements fit it (empty in advice saved
  /// before placements were replayed).
  std::vector<std::size_t> fits_in;
  /// The least of smallest_by_placement (smallest_limit when it is empty).
  [[nodiscard]] std::size_t smallest_low() const noexcept {
    return smallest_by_placement.empty()
               ? smallest_limit
               : *std::min_element(smallest_by_placement.begin(), smallest_by_placement.end());
  }
  stranded_split stranded;               // at the first peak of reserved
  stranded_split stranded_at_allocated;  // at the first peak of allocated
  std::vector<growth_event> growth;      // replay_moments::growth
  std::size_t growth_total = 0;
  usage_curve curve;
};

struct advice {
  std::string file;
  int device = 0;
  std::size_t trace_events = 0;
  std::size_t replay_events = 0;
  std::size_t live_peak = 0;  // the trace's peak of live requested bytes: no limit below fits
  /// The request the trace ended in, which ran out of memory when it was recorded: replayed as
  /// the trace's last allocation (replay_failed_request()), so each policy is asked for it too.
  std::optional<std::size_t> failed_request;
  recorded_figures recorded;
  std::optional<std::string> recorded_conf;
  /// The device's total memory, where given (--device-memory): a limit becomes a fraction of it.
  std::optional<std::size_t> device_memory;
  /// The reserved limit the recommendation's line must set as per_process_memory_fraction (a
  /// page-aligned fit limit), where what it claims needs one: its policy collects garbage (which
  /// PyTorch does only under a fraction), or reserves more than the limit without one.
  std::optional<std::size_t> line_limit;
  std::vector<std::size_t> fit_limits;  // as asked, in order
  /// Each fit limit as it was given ("8.8 GiB" for --fit 8.8GiB); empty: format_bytes'.
  std::vector<std::string> fit_labels;
  /// The label of fit limit `k`: as given, else in bytes' own units.
  [[nodiscard]] std::string fit_label(std::size_t k) const;
  std::vector<policy_outcome> policies;  // [0] is the defaults
  std::size_t recommended = 0;           // index into policies
  /// Per fit limit: the simplest policy that fits it (fewest knobs, then lowest peak), if any.
  std::vector<std::optional<std::size_t>> fit_choice;
  /// Per fit limit: whether fit_choice fits it under every placement (false: no policy did, and
  /// the choice fits with ascending addresses only); all true in advice saved before placements.
  std::vector<bool> fit_choice_everywhere;
  policy_detail defaults;
  policy_detail recommendation;
  double seconds = 0;  // the whole search
  unsigned threads = 1;
  /// The index of the smallest fit limit some policy fits, if any.
  [[nodiscard]] std::optional<std::size_t> tightest_fit() const;
};

/// The searched policies: the defaults, then every combination of max_split_size_mb (unset, 64,
/// 128, 256, 512, 1024), roundup_power2_divisions (unset, 2, 4, 8), expandable_segments (unset,
/// True) and, when `collect` (there are limits to fit: garbage collection acts only under a
/// memory fraction), garbage_collection_threshold (unset, 0.6, 0.8), then `user`'s (checked as
/// replay_policies() checks them, a fraction on a device of `device_memory` bytes; one equal to a
/// searched policy is not added twice).
/// @throws logic_error for a blank or unreadable user conf, or a fraction without device memory.
[[nodiscard]] std::vector<replay_policy> advise_policies(
    const std::vector<std::string>& user, bool collect = false,
    std::optional<std::size_t> device_memory = std::nullopt);
/// The searched confs of advise_policies() without a user's, unparsed.
[[nodiscard]] std::vector<std::string> advise_confs(bool collect = false);

/// How many segment placements advise replays the smallest limits under.
inline constexpr std::size_t kAdvicePlacements = 8;
/// Without --fit, how many policies besides the defaults (the lowest peaks with ascending
/// addresses) are replayed under every placement to rank them by their worst peak.
inline constexpr std::size_t kAdviceCandidates = 4;
/// The placements: ascending (the replay's own, as a fresh process's driver mostly hands out
/// addresses), descending, then shuffled with seeds 1, 2, ...; kAdvicePlacements in all.
[[nodiscard]] std::vector<address_placement> advise_placements();

/// Replays `trace` under `o` with reserved limited to `limit` bytes, its segments placed as
/// `placement` says.
[[nodiscard]] fit_outcome replay_under_limit(const prepared_trace& trace,
                                             const allocator_options& o, std::size_t limit,
                                             address_placement placement = {});

/// The smallest multiple of kAdvicePage under which `trace` replays without running out of memory
/// under `o` (segments placed as `placement` says), by bisection between the trace's live peak
/// and `fitting` (a limit thought to fit; widened when it does not). `fits_unlimited`: `fitting`
/// is the peak of `o`'s replay without a limit under `placement`, which fits as it is (not
/// replayed again unless `o` collects garbage or has a lower limit of its own).
[[nodiscard]] std::size_t smallest_fitting_limit(const prepared_trace& trace,
                                                 const allocator_options& o, std::size_t fitting,
                                                 address_placement placement = {},
                                                 bool fits_unlimited = false);

/// The split of reserved-but-free bytes at the first moment reserved reaches its peak under `o`
/// (and its reserved limit, if any).
[[nodiscard]] stranded_split stranded_at_peak(const prepared_trace& trace,
                                              const allocator_options& o);

/// The stranded splits at the first peaks of reserved and of allocated under `o` (and its
/// reserved limit, if any), and the `growth_events` events up to peak reserved that grew reserved
/// most beyond what live blocks needed.
[[nodiscard]] replay_moments moments_of(const prepared_trace& trace, const allocator_options& o,
                                        std::size_t growth_events = 5);
/// Reserved and allocated over `trace` under `o`, in at most `points` points.
[[nodiscard]] usage_curve usage_over_trace(const prepared_trace& trace, const allocator_options& o,
                                           std::size_t points = 1500);

/// The whole advice for `device`'s trace of `s`: every policy of `policies` (advise_policies(),
/// the defaults first) replayed without a limit (sweep_policies()) and under each of
/// `fit_limits`, on `threads` threads (0: one per core); `device_memory` turns the recommendation's
/// limit into a fraction (recommendation_lines()).
/// @throws logic_error when the first policy is not the defaults; format_error for sizes beyond
/// 64 bits; interrupted on Ctrl-C.
[[nodiscard]] advice advise_snapshot(const torch_snapshot& s, const std::string& file, int device,
                                     const std::vector<replay_policy>& policies,
                                     const std::vector<std::size_t>& fit_limits,
                                     unsigned threads = 0,
                                     std::optional<std::size_t> device_memory = std::nullopt);

/// The tables: the recommendation (with the line to use), the fit table, the stranded split of
/// the defaults beside the recommendation's, and the searched policies ranked.
[[nodiscard]] std::vector<presentation::table> advice_tables(const advice& a);
/// "PYTORCH_CUDA_ALLOC_CONF=..." for PyTorch's allocator, or "(unset)" for the defaults.
[[nodiscard]] std::string torch_env_line(const std::string& conf);

/// per_process_memory_fraction for a reserved limit of `limit` bytes on a device of
/// `device_memory`: six decimals, above limit / device_memory by one to two millionths, so the
/// limit PyTorch derives (the fraction times the device's memory, rounded down) is at least
/// `limit` and less than one 2 MiB page above it; at most 1. "0.110634".
[[nodiscard]] std::string fraction_text(std::size_t limit, std::size_t device_memory);

/// The lines advise prints for its recommendation, exactly as a user pastes them.
struct recommendation_lines {
  /// The conf: the policy's, with per_process_memory_fraction where advice::line_limit asks
  /// for one (a number with the device's memory, else a shell command that computes it with the
  /// running PyTorch).
  std::string conf;
  std::string torch;  // PYTORCH_CUDA_ALLOC_CONF=<conf>, or "(unset)"
  std::string gbt;    // gbt.use(conf="<conf>"); empty where the fraction is left to the shell
};
[[nodiscard]] recommendation_lines lines_of(const advice& a);
/// The schema of advice files: 2 since garbage_collection_threshold is replayed only under a
/// memory fraction and the recommendation carries its fraction.
inline constexpr int kAdviceSchemaVersion = 2;
/// The advice as JSON (sizes in bytes), with the tables; `gpu-basics report` draws it.
[[nodiscard]] nlohmann::json to_json(const advice& a);
/// The advice of to_json() read back (`source` names it in messages); the searched confs are
/// kept as written.
/// @throws format_error naming `source` for JSON that is not such an advice.
[[nodiscard]] advice advice_from_json(const nlohmann::json& j, const std::string& source);

/// Frames of a device's alloc entries, by their ordinal among its allocs (0: the first).
struct alloc_frames {
  std::map<std::size_t, std::vector<std::string>> frames;
  std::size_t allocs = 0;             // the device's alloc entries, all of them
  std::vector<std::string> last_oom;  // the frames of its last oom entry, if any
};

/// The frames of `device`'s alloc entries numbered `ordinals`, read from the snapshot file at
/// `path` again with the entries' frames kept ("file:line in function", innermost first): the
/// Python frames, at most `most`, or where an entry has none its other frames; an entry without
/// frames is left out.
/// @throws format_error as read_torch_snapshot().
[[nodiscard]] alloc_frames read_alloc_frames(const std::string& path, int device,
                                             const std::set<std::size_t>& ordinals,
                                             std::size_t most = 16);

/// Fills in the Python frames of the requests `a` names (each detailed policy's requests at peak
/// reserved and peak allocated, the first failing one under each limit and a page below its
/// smallest), read from the snapshot file `s` was read from. Returns whether any had frames
/// (a snapshot recorded without stacks has none).
/// @throws format_error as read_alloc_frames(), and when the file's allocations are not those of
/// `s` (it changed between the reads).
/// `failed_request`: as attach_frames_from_bytes()'.
bool attach_frames(advice& a, const torch_snapshot& s, const std::string& path,
                   bool failed_request = false);

/// Fills in the Python frames as attach_frames() does, from the snapshot's pickle `bytes` (named
/// `name` in messages) rather than a file. `failed_request`: replay_failed_request() turned the
/// trace's last oom entry into its last alloc, which gets that entry's frames.
/// @throws format_error as attach_frames().
bool attach_frames_from_bytes(advice& a, const torch_snapshot& s, std::string_view bytes,
                              std::string_view name, bool failed_request = false);

/// Where the trace of `device` ends in a request that ran out of memory (an oom entry with no
/// alloc or free after it: PyTorch records one when it raises torch.OutOfMemoryError), turns that
/// entry into the allocation it asked for (its size and stream, at an address no block of the
/// snapshot has), so that a replay asks for it too. Returns its size, or nothing where the trace
/// does not end so or holds no other allocation.
std::optional<std::size_t> replay_failed_request(torch_snapshot& s, int device);

/// advise_from_bytes()' options: what gpu_basics_torch_advise() (the C ABI of the torch allocator
/// library) reads from its options JSON.
struct advise_request {
  std::vector<std::size_t> fit_limits;       // --fit, in bytes
  std::optional<std::size_t> device_memory;  // --device-memory
  std::optional<int> device;                 // default: the snapshot's busiest device
  bool failed_request = true;                // replay_failed_request() first
  unsigned threads = 0;                      // 0: one per core
  std::string name = "snapshot";             // the snapshot's name in messages and the advice
};

/// The advice `gpu-basics advise` gives for a snapshot, from its pickle bytes in memory (plain,
/// not gzip), frames included (a snapshot whose frames cannot be read is advised without them).
struct bytes_advice {
  advice a;
  std::optional<std::size_t> failed_request;  // replay_failed_request()'s
};
/// @throws format_error as parse_torch_snapshot() and advise_snapshot(); logic_error for a device
/// the snapshot has no trace of.
[[nodiscard]] bytes_advice advise_from_bytes(std::string_view bytes, const advise_request& r);

}  // namespace gpu_basics

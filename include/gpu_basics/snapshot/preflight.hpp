// Pre-flight: PyTorch's peak memory at a batch size nobody has run, from snapshots of the same job
// recorded at two or three small batch sizes. The recordings' allocations are aligned as a diff
// aligns lines (by stream, frames and size class), each free with its block's; each aligned
// allocation's requested size is modelled as a + b * batch (fitted from two recordings, checked
// exactly against a third; scratch freed within its operation, whose kernel and workspace may
// change with the shape, is taken piecewise from the two recordings nearest the batch and
// counted); the trace is synthesized at any batch and replayed through the one
// replay engine, under PyTorch's defaults and the policy advise recommends; the largest batch that
// fits a limit is bisected. Where the recordings cannot be aligned, or a size is not affine, it
// says so in one message naming the event and its frames: never a silent guess. Host-only.
// `gpu-basics preflight` prints it (docs/preflight.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/snapshot/replay.hpp"

namespace gpu_basics {

/// Recordings that cannot be modelled: their sequences part with no consistent alignment, or an
/// allocation's size is not affine in the batch. what() names the event (its index in each
/// recording's replayed trace), its action, size and frames. A format_error: the input is at fault.
class preflight_error : public format_error {
 public:
  preflight_error(const std::string& message, std::size_t event)
      : format_error(message), event_(event) {}
  /// The event's index in the replayed trace of the recording named first in the message.
  [[nodiscard]] std::size_t event() const noexcept { return event_; }

 private:
  std::size_t event_;
};

/// One recording of the job at one batch size: its device's trace as to_replay_trace() makes it
/// and, where the snapshot has them, each allocation's frames.
struct batch_recording {
  std::size_t batch = 0;
  std::string name;  // the file, in messages
  std::vector<replay_event> events;
  /// Per event: its frames joined ("file:line in function; ..."), empty where there are none
  /// (frees, allocations recorded without stacks). Empty altogether: no frames at all.
  std::vector<std::string> frames;
};

/// Reads the snapshot at `path` (plain pickle or gzip) as the recording at `batch`: its busiest
/// device's trace and its allocations' Python frames.
/// @throws format_error as read_torch_snapshot().
[[nodiscard]] batch_recording read_batch_recording(const std::string& path, std::size_t batch);

/// The batch model: per recording taken as the base, its events aligned with the others', each
/// allocation's size as a function of the batch.
class batch_model {
 public:
  /// Aligns and fits `recordings` (2 or 3, batches strictly increasing).
  /// @throws logic_error for another count of recordings or batches that do not increase;
  /// preflight_error where the sequences part with no consistent alignment, a recording has no
  /// events or more than half the longest one's unmatched, or a size (not scratch) is not affine
  /// or its line comes below 0 at batch 1.
  explicit batch_model(std::vector<batch_recording> recordings);

  /// The trace at `batch` (>= 1): the events of the recording closest to it (the larger of two
  /// equally close), in its order and on its streams, each allocation at its modelled size, each
  /// block a fresh id (1, 2, ...) that its free names.
  /// @throws preflight_error where a size comes below 0, or beyond kMaxReplayBytes, at `batch`;
  /// logic_error for batch 0.
  [[nodiscard]] std::vector<replay_event> trace_at(std::size_t batch) const;

  [[nodiscard]] const std::vector<batch_recording>& recordings() const noexcept {
    return recordings_;
  }
  /// Events of recording `base` that some other recording does not have (modelled from those
  /// that do, or kept at its own size where it alone has them).
  [[nodiscard]] std::size_t unmatched(std::size_t base) const { return models_.at(base).unmatched; }
  /// Whether some allocation of recording `base`'s model grows with the batch (else every batch
  /// that model synthesizes needs what `base` needs). The batches above the largest recording are
  /// its model's: grows(recordings().size() - 1).
  [[nodiscard]] bool grows(std::size_t base) const { return models_.at(base).grows; }
  /// Scratch allocations of recording `base`'s model whose size is not affine in the batch (a
  /// kernel, and its workspace, chosen by the shape): freed within kScratchSpan events of their
  /// allocation, each taken from the two recordings nearest the batch. `first` describes the first.
  struct not_affine_scratch {
    std::size_t count = 0;
    std::string first;
  };
  [[nodiscard]] const not_affine_scratch& scratch(std::size_t base) const {
    return models_.at(base).scratch;
  }
  /// How soon a block is freed after its allocation (in the recording's allocs and frees) to be
  /// scratch: a workspace lives within the operation that asked for it.
  static constexpr std::size_t kScratchSpan = 4;

 private:
  /// One event of a model: an allocation of a modelled size or the free of one.
  struct slot {
    replay_event::op kind = replay_event::op::alloc;
    stream_handle stream = 0;
    std::uint32_t block = 0;   // the allocation's block: 0 .. blocks - 1
    std::int64_t size_lo = 0;  // the size at batch_lo
    std::int64_t rise = 0;     // size at batch_hi - size_lo (0: a constant)
    std::int64_t batch_lo = 0;
    std::int64_t run = 1;   // batch_hi - batch_lo
    std::size_t event = 0;  // its index in the base recording's events
    /// Scratch not affine in the batch: piecewise through its (batch, size) points, by the
    /// segment of the two nearest the batch (npoints 0: the line above).
    std::uint8_t npoints = 0;
    std::int64_t point_batch[3] = {0, 0, 0};
    std::int64_t point_size[3] = {0, 0, 0};
  };
  struct model {
    std::vector<slot> slots;
    std::size_t unmatched = 0;
    bool grows = false;
    not_affine_scratch scratch;
  };
  /// The size of `sl` (an allocation) at `batch`, before the replay's limits are checked.
  __extension__ [[nodiscard]] static __int128 size_at(const slot& sl, std::int64_t batch);
  std::vector<batch_recording> recordings_;
  std::vector<model> models_;  // one per recording as the base
};

/// One predicted peak.
struct preflight_prediction {
  std::size_t batch = 0;
  std::string which;   // "defaults" or "recommended"
  std::string policy;  // its conf, as advise writes it ("" = the defaults)
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
};

/// The largest batch that fits a reserved limit (replayed under it, PyTorch's out-of-memory path
/// included), per policy: 0 where not even batch 1 fits, nullopt where every batch fits (no
/// allocation grows with the batch).
struct preflight_fit {
  std::size_t limit = 0;
  std::optional<std::size_t> defaults;
  std::optional<std::size_t> recommended;
  std::string policy;  // the recommendation's conf
  /// False where a batch fits above one that does not (the model switches recordings between
  /// them: each recording's range of batches is searched on its own).
  bool monotone = true;
};

struct preflight_report {
  std::vector<std::string> files;
  std::vector<std::size_t> batches;
  std::vector<std::size_t> events;     // per recording, its replayed events
  std::vector<std::size_t> unmatched;  // per recording, its events the others do not have
  /// Per recording, its scratch allocations not affine in the batch (batch_model::scratch), and the
  /// first of the largest recording's described ("" where it has none).
  std::vector<std::size_t> scratch;
  std::string scratch_first;
  std::string recommended;  // advise's recommendation for the largest recording
  std::vector<preflight_prediction> predictions;
  std::optional<preflight_fit> fit;
  /// The chart's points (with_curve): two predictions per batch as in `predictions`, at the
  /// recorded batches, each `at` batch and, where a batch of the fit is found, a geometric set
  /// from the smallest recording to a quarter past the larger largest batch (and those batches);
  /// batches increasing. A point of that set whose trace no replay holds is left out.
  std::vector<preflight_prediction> curve;
  double seconds = 0;
};

/// The trace at `batch` replayed under `o`: the prediction's peaks.
[[nodiscard]] replay_result predict_at(const batch_model& m, std::size_t batch,
                                       const allocator_options& o);

/// The largest batch whose trace replays under `o` within `limit` bytes reserved, searched in
/// each recording's range of batches (those it is the closest to) on its own: bisection within
/// it, doubling above the largest recording's batch (within one range a larger batch is assumed
/// to need no less). 0 where no batch fits; nullopt where nothing of the largest recording's model
/// grows with the batch and it fits (every batch above does). With `monotone`, whether no batch
/// fits above one that does not.
/// @throws interrupted on Ctrl-C.
[[nodiscard]] std::optional<std::size_t> largest_fitting_batch(const batch_model& m,
                                                               const allocator_options& o,
                                                               std::size_t limit,
                                                               bool* monotone = nullptr);

/// The whole pre-flight: the recommendation (advise on the largest recording), the peaks at each
/// of `at` under the defaults and the recommendation, and with `fit_limit` the largest batch that
/// fits it under each, and `with_curve` the chart's points (preflight_report::curve); on `threads`
/// threads (0: one per core).
/// @throws preflight_error as trace_at(); interrupted on Ctrl-C.
[[nodiscard]] preflight_report run_preflight(const batch_model& m,
                                             const std::vector<std::size_t>& at,
                                             std::optional<std::size_t> fit_limit,
                                             unsigned threads = 0, bool with_curve = false);

/// The batches of the chart's points for `r` (its recorded batches, its predictions' batches,
/// and with a batch of the fit found, `kCurvePoints` batches spread geometrically from the
/// smallest recording to a quarter past the larger largest batch, and the largest batches
/// themselves): each once, increasing.
[[nodiscard]] std::vector<std::size_t> preflight_curve_batches(const preflight_report& r);
/// How many batches preflight_curve_batches() spreads up to past the largest batch.
inline constexpr std::size_t kCurvePoints = 16;

/// The tables: the recordings, the predictions, the largest batch.
[[nodiscard]] std::vector<presentation::table> preflight_tables(const preflight_report& r);
/// The report as JSON: "predictions" (batch, which, policy, peak_allocated_bytes,
/// peak_reserved_bytes), and with a limit "largest_batch" (limit_bytes, defaults, recommended,
/// policy, monotone), and with the chart's points "curve" (as "predictions").
[[nodiscard]] nlohmann::json to_json(const preflight_report& r);

}  // namespace gpu_basics

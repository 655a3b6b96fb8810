// Comparing two saved runs figure by figure: every bandwidth, time, FLOP rate, allocator cost
// and pipeline time present in both gets a verdict, same, better or worse, from the change and
// the noise each run recorded. Host-only.
//
// The rule (docs/verdicts.md, "Comparing runs"): with delta = new / baseline - 1 and each side's
// noise the IQR / median of its samples (0 where a run kept one number), a figure is the same
// when |delta| <= max(threshold, noise of the baseline, noise of the new run); otherwise better or
// worse by its direction (higher bandwidth and FLOP/s are better, lower times are better).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/record.hpp"

namespace gpu_basics::verdict {

/// One comparable number of a run.
struct figure {
  std::string id;    // where it lives: "transfer.shapes[[8192, 8192] float32].copies[H2D pinned
                     // 256 MiB].bandwidth_bytes_per_s"
  std::string unit;  // "bytes/s", "flop/s", "s", "fraction"
  double value = 0;  // the median where samples were kept
  double noise = 0;  // IQR / median of the samples; 0 where the run kept one number
  bool higher_better = true;
};

/// Every figure of every result of `r`, in the results' order. Samples, timelines, time stamps,
/// sizes, counts and datasheet ceilings are not figures; a copy's time is left out where its
/// bandwidth is kept.
/// @throws nothing for well-formed JSON; unknown keys are ignored unless their names say a unit.
[[nodiscard]] std::vector<figure> figures_of(const lessons::run_record& r);

enum class change { worse, same, better };

/// "worse", "same", "better".
[[nodiscard]] const char* to_string(change c) noexcept;

struct judgement {
  change verdict = change::same;
  double delta = 0;      // new / baseline - 1
  double tolerance = 0;  // max(threshold, both noises)
};

/// The rule above. `base` must be > 0.
/// @throws logic_error when base <= 0 or a value is not finite.
[[nodiscard]] judgement judge(double base, double base_noise, double value, double value_noise,
                              bool higher_better, double threshold);

struct figure_verdict {
  figure base;
  figure next;
  judgement j;
};

struct comparison {
  std::vector<figure_verdict> rows;  // worst first: worse (largest loss first), same, better
  std::size_t only_in_baseline = 0;
  std::size_t only_in_new = 0;
  double threshold = 0.02;

  [[nodiscard]] std::size_t count(change c) const;
};

/// Throws format_error, one line naming both files, when the runs should not be compared: other
/// schema versions or commands always; another GPU model or driver major version unless `force`.
void ensure_comparable(const lessons::run_record& base, const std::string& base_name,
                       const lessons::run_record& next, const std::string& next_name, bool force);

/// Figures present in both (matched by id, baseline > 0), judged and sorted worst first.
/// @throws logic_error for a threshold outside [0, 1).
[[nodiscard]] comparison compare(const lessons::run_record& base, const lessons::run_record& next,
                                 double threshold);

/// A figure's value as people read it: "55.4 GB/s", "4.84 ms", "756 TFLOP/s", "14.3%".
[[nodiscard]] std::string format_value(double value, const std::string& unit);

/// The table "compare": figure, baseline, new, change, tolerance, verdict.
[[nodiscard]] presentation::table comparison_table(const comparison& c, const std::string& title);

/// {"threshold", "worse", "same", "better", "only_in_baseline", "only_in_new", "figures": [{"id",
/// "unit", "higher_better", "baseline", "baseline_noise", "new", "new_noise", "delta",
/// "tolerance", "verdict"}]}.
[[nodiscard]] nlohmann::json to_json(const comparison& c);

}  // namespace gpu_basics::verdict

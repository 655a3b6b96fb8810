// Comparing two saved runs figure by figure. Each figure has a class: a gate (a headline rate or
// time backed by its samples), informational (a single observation, a count, a summary without
// samples) or not compared (a timeline's points). Only gates decide `compare`'s exit code;
// informational changes are listed apart. Host-only.
//
// The rule (docs/verdicts.md, "Comparing runs"): a gate is worse only when its samples show a
// loss beyond the threshold (max(--threshold, kHostBoundThreshold for pageable host copies,
// kPowerBoundThreshold for GEMMs at the power limit)),
// by a one-sided Mann-Whitney test against the baseline moved by the threshold, with Holm's
// correction over the gates at kCompareAlpha; better is the mirror. An informational figure keeps
// the old rule, listed only: with delta = new / baseline - 1 and each side's noise the IQR /
// median of its samples, it changed when |delta| > max(threshold, both noises).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/host_cpu.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/verdict/compare_stats.hpp"

namespace gpu_basics::verdict {

enum class figure_class { gate, informational, not_compared };

/// "gate", "informational", "not compared".
[[nodiscard]] const char* to_string(figure_class c) noexcept;

/// One comparable number of a run.
struct figure {
  std::string id;    // where it lives (stable, matches runs): "transfer.shapes[[8192, 8192]
                     // float32 256 MiB].copies[H2D pinned 256 MiB].bandwidth_bytes_per_s"
  std::string name;  // as people read it, no word twice: "transfer.shapes [8192, 8192] float32
                     // 256 MiB, H2D pinned"
  std::string unit;  // "bytes/s", "flop/s", "s", "fraction"
  double value = 0;  // the median where samples were kept
  double noise = 0;  // IQR / median of the samples; 0 where the run kept one number
  bool higher_better = true;
  figure_class cls = figure_class::informational;
  std::string why;              // why not a gate: "a single observation", "no samples", ...
  std::vector<double> samples;  // gates: the samples in `unit` (samples_in_unit)
  bool host_bound = false;      // a copy through pageable host memory (kHostBoundThreshold)
  bool power_bound = false;     // a GEMM's rate against the compute peak (kPowerBoundThreshold)
};

/// The class of a summary given the per-sample times kept beside it (null when none): a gate
/// with its samples in `unit`, or informational with the reason in `why`.
[[nodiscard]] figure_class class_of(const nlohmann::json& summary, const nlohmann::json& seconds,
                                    const std::string& unit, std::vector<double>* samples,
                                    std::string* why);

/// Every figure of every result of `r`, in the results' order, with its class. Samples, time
/// stamps, traces, sizes and datasheet ceilings are not figures; a copy's time is left out where
/// its bandwidth is kept; a timeline's points are figures of class not_compared.
/// @throws nothing for well-formed JSON; unknown keys are ignored unless their names say a unit.
[[nodiscard]] std::vector<figure> figures_of(const lessons::run_record& r);

enum class change { worse, same, better };

/// "worse", "same", "better".
[[nodiscard]] const char* to_string(change c) noexcept;

struct judgement {
  change verdict = change::same;
  double delta = 0;      // new / baseline - 1
  double tolerance = 0;  // gates: the practical threshold; informational: max(threshold, noises)
  std::optional<double> p_worse;   // gates: p of "worse beyond the tolerance" (p_worse())
  std::optional<double> p_better;  // gates: p of "better beyond the tolerance"
};

/// The informational rule above. `base` must be > 0.
/// @throws logic_error when base <= 0 or a value is not finite.
[[nodiscard]] judgement judge(double base, double base_noise, double value, double value_noise,
                              bool higher_better, double threshold);

struct figure_verdict {
  figure base;
  figure next;
  judgement j;
};

/// How busy the host's CPUs were during one lesson in each run (environment.host_cpu).
struct host_cpu_pair {
  std::string lesson;
  host_cpu_load base;
  host_cpu_load next;
};

/// How much busier (in shares of all CPU time: stolen plus other processes) a host may be in the
/// new run before host-bound losses are put down to it rather than to the node.
inline constexpr double kBusierHostShare = 0.05;

struct comparison {
  std::vector<figure_verdict> rows;           // gates, worst first: worse (largest loss first),
                                              // same, better
  std::vector<figure_verdict> informational;  // the others present in both, same order
  std::size_t not_compared = 0;               // timeline points present in both
  std::size_t only_in_baseline = 0;
  std::size_t only_in_new = 0;
  double threshold = 0.02;
  double alpha = kCompareAlpha;
  std::vector<host_cpu_pair> host_cpu;  // lessons whose host load both runs recorded

  /// Gates with verdict `c` (only they decide the exit code).
  [[nodiscard]] std::size_t count(change c) const;
  /// Informational figures that changed by `c` under the informational rule.
  [[nodiscard]] std::size_t count_informational(change c) const;
};

/// Throws format_error, one line naming both files, when the runs should not be compared: other
/// schema versions or commands always; another GPU model or driver major version unless `force`.
void ensure_comparable(const lessons::run_record& base, const std::string& base_name,
                       const lessons::run_record& next, const std::string& next_name, bool force);

/// Figures present in both (matched by id, baseline > 0): a gate where both runs kept samples,
/// judged by the gate rule with Holm's correction over the gates; the others informational.
/// @throws logic_error for a threshold outside [0, 1).
[[nodiscard]] comparison compare(const lessons::run_record& base, const lessons::run_record& next,
                                 double threshold);

/// The sentence on the host's load for each lesson with a worse host-bound gate (pageable copies,
/// host memcpy) where both runs recorded it: busier in the new run by more than
/// kBusierHostShare (stolen time or other processes) puts the loss down to the host's load; not
/// busier says the loss is the node's own as far as the CPU counters show. Empty otherwise.
[[nodiscard]] std::vector<std::string> host_load_notes(const comparison& c);

/// A figure's value as people read it: "55.4 GB/s", "4.84 ms", "756 TFLOP/s", "14.3%".
[[nodiscard]] std::string format_value(double value, const std::string& unit);

/// The table "compare" of the gates: figure, baseline, new, change, threshold, p, verdict.
[[nodiscard]] presentation::table comparison_table(const comparison& c, const std::string& title);

/// The table "compare_informational": the informational figures that changed beyond
/// max(threshold, noise), with why each is no gate. Never decides the exit code.
[[nodiscard]] presentation::table informational_table(const comparison& c);

/// {"threshold", "alpha", "worse", "same", "better", "only_in_baseline", "only_in_new",
/// "not_compared", "figures": [gate rows], "informational": {"worse", "same", "better",
/// "figures": [rows]}, "host_cpu": {lesson: {"baseline", "new"}}}; a row is {"id", "name", "class",
/// "why" (informational), "unit", "higher_better", "baseline", "baseline_noise",
/// "baseline_samples", "new", "new_noise", "new_samples", "delta", "tolerance", "p_worse",
/// "p_better" (gates), "verdict"}.
[[nodiscard]] nlohmann::json to_json(const comparison& c);

}  // namespace gpu_basics::verdict

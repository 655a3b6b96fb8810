// The statistics behind `compare`'s gates: a one-sided Mann-Whitney rank test against a shifted
// baseline (is the new run slower by more than the threshold?), Holm's correction for the number
// of gates, and the samples of a rate read back from its times. Host-only, fed synthetic samples
// in tests.
//
// Why a rank test against a shifted baseline (docs/verdicts.md, "Comparing runs"): "worse" must
// be both practically large and statistically clear. Testing H0 "the new run is at most
// `threshold` worse" asks both at once: it is rejected only when the samples show a loss beyond
// the threshold, not merely a loss. Ranks make no assumption on the shape of timing noise (long
// right tails, clock steps) and are unchanged by the time -> rate transform.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpu_basics::verdict {

/// The family-wise false-alarm rate of a comparison: the chance that two runs of one unchanged
/// node give any gate "worse" is at most this (Holm over the gates).
inline constexpr double kCompareAlpha = 0.01;

/// Fewer samples than this on either side cannot make a change clear: the figure is informational.
inline constexpr std::size_t kMinGateSamples = 5;

/// Copies through pageable host memory (plain and staged) vary between processes with the host's
/// page state far beyond their samples' spread: in the committed pair of one H200 minutes apart
/// (tests/data/h200_all*.json), pageable figures moved from -52% to +58% while every pinned and
/// device figure stayed within its noise. Their gates use at least this practical threshold.
inline constexpr double kHostBoundThreshold = 0.20;

/// Tensor-core GEMMs run at the GPU's power limit, where the clocks follow the card's temperature
/// and power draw: on one H100, four runs of `all` minutes apart gave the bf16 8192^3 GEMM steady
/// medians from 1.543 to 1.645 ms (6.6% apart) with every run's samples within 0.2%. Their gates
/// (figures beside a peak_flops_per_s) use at least this practical threshold.
inline constexpr double kPowerBoundThreshold = 0.10;

/// The smallest p-value mann_whitney_greater can give with n1 and n2 samples: every y above
/// every x. A gate among `gates` whose smallest p is above kCompareAlpha / gates can never be
/// found worse (Holm's first step), whatever its samples say: it is informational.
[[nodiscard]] double smallest_p(std::size_t n1, std::size_t n2);

/// One-sided Mann-Whitney U test: the p-value of "y is stochastically larger than x", by the
/// normal approximation with the tie and continuity corrections. 1 when either side is empty or
/// every value ties.
[[nodiscard]] double mann_whitney_greater(std::span<const double> x, std::span<const double> y);

/// Holm's step-down procedure: which hypotheses are rejected at family-wise level `alpha`.
[[nodiscard]] std::vector<bool> holm_reject(std::span<const double> p, double alpha);

/// The p-value of "new is worse than base by more than `threshold`": for a higher-is-better
/// figure, new < base x (1 - threshold); for a lower-is-better one, new > base x (1 + threshold).
/// Samples are in the figure's unit.
[[nodiscard]] double p_worse(std::span<const double> base, std::span<const double> next,
                             bool higher_better, double threshold);

/// The mirror: "new is better than base by more than `threshold`".
[[nodiscard]] double p_better(std::span<const double> base, std::span<const double> next,
                              bool higher_better, double threshold);

/// A figure's samples in its own unit, from the per-sample times a result keeps beside its
/// summary (the sibling key "seconds"): the times themselves for a time ("s"), work / time for a
/// rate, the work being summary.min x max(seconds). Nothing when the samples do not reproduce the
/// summary (its count, or its max as work / min(seconds) within 1e-6): they belong to another
/// figure, or the summary was edited.
[[nodiscard]] std::optional<std::vector<double>> samples_in_unit(const nlohmann::json& summary,
                                                                 const nlohmann::json& seconds,
                                                                 const std::string& unit);

}  // namespace gpu_basics::verdict

// Matrix-multiply arithmetic, host-only: precisions, datasheet peaks, the check's tolerance and
// error metric, and picking the fastest autotune candidate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "gpu_basics/core/hardware.hpp"

namespace gpu_basics {

enum class gemm_precision { fp16, bf16, tf32, fp32 };

/// "fp16", "bf16", "tf32", "fp32".
[[nodiscard]] std::string_view to_string(gemm_precision p) noexcept;
/// The precision named exactly so by to_string(); nullopt for any other text.
[[nodiscard]] std::optional<gemm_precision> parse_gemm_precision(std::string_view s);

struct gemm_shape {
  std::uint64_t m = 0, n = 0, k = 0;
  bool operator==(const gemm_shape&) const = default;
};

/// Dense datasheet peak for the precision (fp16/bf16 tensor cores, tf32, plain fp32).
[[nodiscard]] double datasheet_peak_flops(const gpu_datasheet& d, gemm_precision p) noexcept;

/// Largest |got - ref| over the largest |ref|: 0 for an exact result.
/// @throws logic_error when the spans differ in size or are empty.
[[nodiscard]] double max_relative_error(std::span<const double> got, std::span<const double> ref);

/// What the check accepts: output rounding of the precision, with room for k-term accumulation
/// order (fp16 1e-2, bf16 2e-2, tf32 1e-2, fp32 1e-4, of the largest reference value).
[[nodiscard]] double gemm_tolerance(gemm_precision p) noexcept;

/// Index of the candidate with the smallest median time (candidates with no times are skipped);
/// -1 if none has times.
[[nodiscard]] int fastest_candidate(const std::vector<std::vector<double>>& seconds);

/// Rounds of autotuning: each candidate is timed once per round.
inline constexpr int kTuneRounds = 4;

/// The times of `candidates` candidates over `rounds` interleaved rounds: one call of
/// `time_once(c)` per candidate per round, candidate 0 first in every round, so that a clock ramp
/// or drift while tuning (a GPU boosting as the GEMMs begin) slows every candidate alike rather
/// than those timed first. `time_once` returns the seconds of one run, or nullopt when the
/// candidate cannot run: it is then left out of later rounds and its times are dropped.
[[nodiscard]] std::vector<std::vector<double>> time_candidates_interleaved(
    int candidates, int rounds, const std::function<std::optional<double>(int)>& time_once);

}  // namespace gpu_basics

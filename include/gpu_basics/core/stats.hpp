// Summary statistics and measurement maths: free functions over samples, host-only, so they
// are unit-tested with synthetic data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpu_basics {

/// Robust summary of repeated measurements. `rel_spread` is IQR / median: the spread of the
/// middle half of the samples relative to the typical one (0.01 = 1%).
struct summary {
  std::size_t count = 0;
  double median = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for one sample
  double p25 = 0;
  double p75 = 0;
  double iqr = 0;
  double rel_spread = 0;

  bool operator==(const summary&) const = default;
};

/// Linear-interpolated quantile (q in [0, 1]) of samples (any order).
/// @throws logic_error when samples is empty or q is outside [0, 1].
[[nodiscard]] double quantile(std::span<const double> samples, double q);

/// The summary of samples in any order.
/// @throws logic_error on an empty span or a non-finite sample.
[[nodiscard]] summary summarize(std::span<const double> samples);

/// Each sample mapped by f before summarizing (e.g. seconds → bytes/s).
/// @throws logic_error on an empty span or a non-finite mapped value; what f throws.
template <class F>
[[nodiscard]] summary summarize_mapped(std::span<const double> samples, F f) {
  std::vector<double> mapped;
  mapped.reserve(samples.size());
  for (double s : samples) mapped.push_back(f(s));
  return summarize(mapped);
}

/// bytes / seconds.
/// @throws logic_error when seconds <= 0.
[[nodiscard]] double bandwidth_bytes_per_s(std::uint64_t bytes, double seconds);

/// 2·m·n·k / seconds.
/// @throws logic_error when seconds <= 0.
[[nodiscard]] double gemm_flops_per_s(std::uint64_t m, std::uint64_t n, std::uint64_t k,
                                      double seconds);

/// 100 · value / ceiling, or a negative value when the ceiling is unknown (<= 0).
[[nodiscard]] double percent_of(double value, double ceiling);

/// {"count", "median", "mean", "min", "max", "stdev", "p25", "p75", "iqr", "rel_spread"}.
void to_json(nlohmann::json& j, const summary& s);
/// Reads what to_json wrote; a missing key keeps its default.
/// @throws json_path_error (core/json.hpp) on a value of the wrong type.
void from_json(const nlohmann::json& j, summary& s);

}  // namespace gpu_basics

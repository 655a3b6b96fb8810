#include "gpu_basics/core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

namespace {
double sorted_quantile(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}
}  // namespace

double quantile(std::span<const double> samples, double q) {
  GPU_BASICS_EXPECTS(!samples.empty(), "quantile of no samples");
  GPU_BASICS_EXPECTS(q >= 0.0 && q <= 1.0, "quantile outside [0, 1]");
  std::vector<double> v(samples.begin(), samples.end());
  std::sort(v.begin(), v.end());
  return sorted_quantile(v, q);
}

summary summarize(std::span<const double> samples) {
  GPU_BASICS_EXPECTS(!samples.empty(), "summary of no samples");
  for (double s : samples) GPU_BASICS_EXPECTS(std::isfinite(s), "non-finite sample");
  std::vector<double> v(samples.begin(), samples.end());
  std::sort(v.begin(), v.end());
  summary r;
  r.count = v.size();
  r.min = v.front();
  r.max = v.back();
  r.median = sorted_quantile(v, 0.5);
  r.p25 = sorted_quantile(v, 0.25);
  r.p75 = sorted_quantile(v, 0.75);
  r.iqr = r.p75 - r.p25;
  r.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - r.mean) * (x - r.mean);
    r.stdev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  r.rel_spread = r.median != 0.0 ? r.iqr / std::abs(r.median) : 0.0;
  return r;
}

double bandwidth_bytes_per_s(std::uint64_t bytes, double seconds) {
  GPU_BASICS_EXPECTS(seconds > 0.0, "bandwidth over a non-positive time");
  return static_cast<double>(bytes) / seconds;
}

double gemm_flops_per_s(std::uint64_t m, std::uint64_t n, std::uint64_t k, double seconds) {
  GPU_BASICS_EXPECTS(seconds > 0.0, "FLOP/s over a non-positive time");
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / seconds;
}

double percent_of(double value, double ceiling) {
  if (!(ceiling > 0.0)) return -1.0;
  return 100.0 * value / ceiling;
}

void to_json(nlohmann::json& j, const summary& s) {
  j = nlohmann::json{
      {"count", s.count}, {"median", s.median},        {"mean", s.mean}, {"min", s.min},
      {"max", s.max},     {"stdev", s.stdev},          {"p25", s.p25},   {"p75", s.p75},
      {"iqr", s.iqr},     {"rel_spread", s.rel_spread}};
}

void from_json(const nlohmann::json& j, summary& s) {
  require_json_object(j);
  s = summary{};
  read_member(j, "count", s.count);
  read_member(j, "median", s.median);
  read_member(j, "mean", s.mean);
  read_member(j, "min", s.min);
  read_member(j, "max", s.max);
  read_member(j, "stdev", s.stdev);
  read_member(j, "p25", s.p25);
  read_member(j, "p75", s.p75);
  read_member(j, "iqr", s.iqr);
  read_member(j, "rel_spread", s.rel_spread);
}

}  // namespace gpu_basics

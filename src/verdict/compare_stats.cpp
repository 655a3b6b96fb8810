#include "gpu_basics/verdict/compare_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gpu_basics::verdict {

double mann_whitney_greater(std::span<const double> x, std::span<const double> y) {
  const std::size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  if (n1 == 0 || n2 == 0) return 1.0;
  std::vector<std::pair<double, bool>> all;  // value, from y
  all.reserve(n);
  for (double v : x) all.emplace_back(v, false);
  for (double v : y) all.emplace_back(v, true);
  std::sort(all.begin(), all.end());
  double rank_sum_y = 0, ties = 0;  // ties: sum of t^3 - t over tied groups
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && all[j + 1].first == all[i].first) ++j;
    const double rank = (static_cast<double>(i + j) / 2) + 1;  // mid-rank, 1-based
    for (std::size_t k = i; k <= j; ++k)
      if (all[k].second) rank_sum_y += rank;
    const double t = static_cast<double>(j - i + 1);
    ties += t * t * t - t;
    i = j + 1;
  }
  const double a = static_cast<double>(n1), b = static_cast<double>(n2), m = a + b;
  const double u = rank_sum_y - b * (b + 1) / 2;  // pairs (x, y) with y > x, ties half
  const double var = a * b / 12 * ((m + 1) - ties / (m * (m - 1)));
  if (!(var > 0)) return 1.0;
  const double z = (u - a * b / 2 - 0.5) / std::sqrt(var);
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

double smallest_p(std::size_t n1, std::size_t n2) {
  std::vector<double> x(n1), y(n2);
  std::iota(x.begin(), x.end(), 0.0);
  std::iota(y.begin(), y.end(), static_cast<double>(n1));
  return mann_whitney_greater(x, y);
}

std::vector<bool> holm_reject(std::span<const double> p, double alpha) {
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](auto i, auto j) { return p[i] < p[j]; });
  std::vector<bool> reject(p.size(), false);
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (!(p[order[k]] <= alpha / static_cast<double>(p.size() - k))) break;
    reject[order[k]] = true;
  }
  return reject;
}

namespace {

std::vector<double> scaled(std::span<const double> v, double f) {
  std::vector<double> out(v.begin(), v.end());
  for (auto& x : out) x *= f;
  return out;
}

}  // namespace

double p_worse(std::span<const double> base, std::span<const double> next, bool higher_better,
               double threshold) {
  // Worse beyond the threshold: the new samples fall below (rates) or rise above (times) the
  // baseline's moved by the threshold.
  if (higher_better) return mann_whitney_greater(next, scaled(base, 1 - threshold));
  return mann_whitney_greater(scaled(base, 1 + threshold), next);
}

double p_better(std::span<const double> base, std::span<const double> next, bool higher_better,
                double threshold) {
  if (higher_better) return mann_whitney_greater(scaled(base, 1 + threshold), next);
  return mann_whitney_greater(next, scaled(base, 1 - threshold));
}

std::optional<std::vector<double>> samples_in_unit(const nlohmann::json& summary,
                                                   const nlohmann::json& seconds,
                                                   const std::string& unit) {
  if (!seconds.is_array() || seconds.empty() || !summary.is_object()) return std::nullopt;
  std::vector<double> s;
  for (const auto& v : seconds) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      return std::nullopt;
    s.push_back(v.get<double>());
  }
  const auto num = [&](const char* k) -> std::optional<double> {
    if (!summary.contains(k) || !summary[k].is_number()) return std::nullopt;
    return summary[k].get<double>();
  };
  if (const auto count = num("count"); count && *count != static_cast<double>(s.size()))
    return std::nullopt;
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  const auto min = num("min"), max = num("max");
  if (!min || !max || !(*min > 0)) return std::nullopt;
  const auto near = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::abs(b); };
  if (unit == "s") {
    if (!near(*lo, *min) || !near(*hi, *max)) return std::nullopt;
    return s;
  }
  const double work = *min * *hi;
  if (!near(work / *lo, *max)) return std::nullopt;
  for (auto& x : s) x = work / x;
  return s;
}

}  // namespace gpu_basics::verdict

#include "gpu_basics/core/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

std::string_view to_string(stop_reason r) noexcept {
  switch (r) {
    case stop_reason::precise:
      return "precise";
    case stop_reason::max_samples:
      return "max_samples";
    case stop_reason::timeout:
      return "timeout";
  }
  return "?";
}

double median_noise(std::span<const double> samples) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::size_t n = samples.size();
  if (n < 2) return inf;
  std::vector<double> x(samples.begin(), samples.end());
  std::sort(x.begin(), x.end());
  const double median = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
  if (!(median > 0)) return inf;
  // Ranks (1-based) of the order statistics that bound the median with ~95% confidence: the
  // number of samples below the median is Binomial(n, 1/2).
  const double half = 1.96 * std::sqrt(static_cast<double>(n)) / 2.0;
  const auto lo = static_cast<std::size_t>(
      std::clamp(std::floor(static_cast<double>(n) / 2.0 - half), 1.0, static_cast<double>(n)));
  const auto hi = static_cast<std::size_t>(std::clamp(
      std::ceil(static_cast<double>(n) / 2.0 + half) + 1.0, 1.0, static_cast<double>(n)));
  return (x[hi - 1] - x[lo - 1]) / (2.0 * median);
}

figure_sampler::figure_sampler(const stopping_rule& rule, clock now)
    : rule_(rule), now_(std::move(now)) {
  GPU_BASICS_EXPECTS(rule.min_samples >= 1, "a stopping rule needs min_samples >= 1");
  GPU_BASICS_EXPECTS(rule.max_samples >= rule.min_samples,
                     "a stopping rule needs max_samples >= min_samples");
  GPU_BASICS_EXPECTS(rule.max_noise > 0, "a stopping rule needs max_noise > 0");
  GPU_BASICS_EXPECTS(rule.timeout_s > 0, "a stopping rule needs timeout_s > 0");
  GPU_BASICS_EXPECTS(rule.timeout_floor >= 1, "a stopping rule needs timeout_floor >= 1");
  if (!now_) now_ = [] { return host_seconds(); };
  start_s_ = last_s_ = now_();
}

bool figure_sampler::done() {
  const auto n = static_cast<int>(samples_.size());
  if (n >= rule_.max_samples) {
    reason_ = stop_reason::max_samples;
    return true;
  }
  if (n >= std::min(rule_.timeout_floor, rule_.min_samples) &&
      last_s_ - start_s_ >= rule_.timeout_s) {
    reason_ = stop_reason::timeout;
    return true;
  }
  if (n >= rule_.min_samples && median_noise(samples_) <= rule_.max_noise) {
    reason_ = stop_reason::precise;
    return true;
  }
  return false;
}

int figure_sampler::next_batch() {
  if (done()) return 0;
  const auto n = static_cast<int>(samples_.size());
  if (n < rule_.min_samples) return rule_.min_samples - n;
  return std::clamp(n / 2, 1, rule_.max_samples - n);
}

void figure_sampler::add(std::span<const double> samples) {
  for (double s : samples) {
    GPU_BASICS_EXPECTS(std::isfinite(s), "a sample is not a finite number");
    samples_.push_back(s);
  }
  last_s_ = now_();
}

sampling_outcome figure_sampler::outcome() const {
  sampling_outcome o;
  o.samples = samples_.size();
  o.noise = median_noise(samples_);
  o.reason = reason_;
  o.elapsed_s = last_s_ - start_s_;
  return o;
}

void to_json(nlohmann::json& j, const sampling_outcome& s) {
  j = nlohmann::json{{"samples", s.samples},
                     {"noise", std::isfinite(s.noise) ? nlohmann::json(s.noise) : nlohmann::json()},
                     {"stopped", std::string(to_string(s.reason))},
                     {"elapsed_s", s.elapsed_s}};
}

void from_json(const nlohmann::json& j, sampling_outcome& s) {
  require_json_object(j);
  s = sampling_outcome{};
  read_member(j, "samples", s.samples);
  if (const auto it = j.find("noise"); it != j.end()) {
    if (it->is_null())
      s.noise = std::numeric_limits<double>::infinity();
    else
      read_member(j, "noise", s.noise);
  }
  if (const auto it = j.find("stopped"); it != j.end()) {
    if (!it->is_string()) throw json_type_error("a string", *it);
    const std::string r = it->get<std::string>();
    if (r == "precise")
      s.reason = stop_reason::precise;
    else if (r == "max_samples")
      s.reason = stop_reason::max_samples;
    else if (r == "timeout")
      s.reason = stop_reason::timeout;
    else
      throw json_type_error("precise, max_samples or timeout", *it);
  }
  read_member(j, "elapsed_s", s.elapsed_s);
}

}  // namespace gpu_basics

// The one measurement strategy behind every sampled figure: warm-up, then samples until the
// figure is precise enough, bounded by a minimum and a maximum count and a timeout. The
// benchmark body supplies only what to run (and verify); this decides how many samples and
// records why it stopped. Host-only: the stopping rule is tested with synthetic timers.
//
// Precision is the relative half-width of a distribution-free 95% confidence interval of the
// median (two order statistics around it), so long right tails and clock steps do not fake
// precision the way a standard deviation of a few samples can.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpu_basics {

/// How a figure is sampled: configuration keys benchmark.* (docs/configuration.md).
struct stopping_rule {
  int warmup = 3;           // untimed runs first (benchmark.warmup_iterations)
  int min_samples = 16;     // fewer only when the timeout comes first (benchmark.min_samples)
  int max_samples = 20;     // never more (benchmark.iterations)
  double max_noise = 0.01;  // stop once the median's 95% CI half-width is this share of it
  double timeout_s = 3.0;   // stop once a figure's samples took this long (wall time)
  // The fewest samples the timeout leaves (min_samples when that is fewer), so a slow figure
  // still gets a verdict: compare's rank test can find a loss with 10 samples a side among up to
  // about 100 gates, with 5 a side among none (verdict/compare_stats.hpp, smallest_p).
  int timeout_floor = 10;
};

/// `rule` with at most `max_samples` (and no more than that as its minimum).
[[nodiscard]] inline stopping_rule capped(stopping_rule rule, int max_samples) {
  rule.max_samples = max_samples < rule.max_samples ? max_samples : rule.max_samples;
  rule.min_samples = rule.min_samples < rule.max_samples ? rule.min_samples : rule.max_samples;
  return rule;
}

/// `rule` with no warm-up runs of its own (the caller warmed up, or the first run is measured).
[[nodiscard]] inline stopping_rule without_warmup(stopping_rule rule) {
  rule.warmup = 0;
  return rule;
}

/// Exactly `samples` after `warmup` runs: no noise criterion and no timeout stop it sooner.
[[nodiscard]] inline stopping_rule fixed_count(int warmup, int samples) {
  constexpr double never = std::numeric_limits<double>::infinity();
  return {warmup, samples, samples, never, never};
}

enum class stop_reason { precise, max_samples, timeout };

[[nodiscard]] std::string_view to_string(stop_reason r) noexcept;

/// How a figure's sampling ended: what it reached and why it stopped.
struct sampling_outcome {
  std::uint64_t samples = 0;
  double noise = 0;  // relative half-width of the median's 95% CI when it stopped
  stop_reason reason = stop_reason::max_samples;
  double elapsed_s = 0;  // wall time from the first sample to the last

  bool operator==(const sampling_outcome&) const = default;
};

/// {"samples", "noise", "stopped", "elapsed_s"}; noise is null where it is not finite.
void to_json(nlohmann::json& j, const sampling_outcome& s);
/// Reads what to_json wrote; a missing key keeps its default.
/// @throws json_path_error (core/json.hpp) on a value of the wrong type or an unknown reason.
void from_json(const nlohmann::json& j, sampling_outcome& s);

/// The relative half-width of a distribution-free 95% confidence interval of the median of
/// `samples` (any order): (x[hi] - x[lo]) / (2 · median), lo and hi the order statistics around
/// n/2 ± 1.96·√n/2. With fewer than six samples the interval is the whole range. Infinite for an
/// empty span or a median <= 0.
[[nodiscard]] double median_noise(std::span<const double> samples);

/// The stopping rule applied to samples as they come. Use:
///
///   figure_sampler s(rule);
///   while (int n = s.next_batch()) s.add(run_n_samples(n));
///   r.seconds = s.seconds(); r.sampling = s.outcome();
///
/// Warm-up runs are the caller's (rule.warmup of them, before the first batch).
class figure_sampler {
 public:
  using clock = std::function<double()>;
  /// `now` gives wall seconds (default: the host's monotonic clock); the timeout counts from
  /// construction.
  /// @throws logic_error when min_samples < 1, max_samples < min_samples, max_noise <= 0,
  /// timeout_s <= 0 or timeout_floor < 1.
  explicit figure_sampler(const stopping_rule& rule, clock now = {});

  /// How many samples to take next: the missing ones up to min_samples, then half as many
  /// again as taken (at least 1, at most up to max_samples); 0 when sampling is over.
  [[nodiscard]] int next_batch();
  /// Appends samples (seconds, or any unit where smaller is a faster run).
  /// @throws logic_error on a non-finite sample.
  void add(std::span<const double> samples);
  void add(double sample) { add(std::span<const double>(&sample, 1)); }

  [[nodiscard]] bool done();
  [[nodiscard]] const std::vector<double>& seconds() const noexcept { return samples_; }
  [[nodiscard]] std::vector<double> take_seconds() noexcept { return std::move(samples_); }
  /// Where sampling stands (its reason is final once next_batch() returned 0).
  [[nodiscard]] sampling_outcome outcome() const;

 private:
  stopping_rule rule_;
  clock now_;
  double start_s_ = 0;
  double last_s_ = 0;
  std::vector<double> samples_;
  stop_reason reason_ = stop_reason::max_samples;
};

/// Runs `one()` until the rule is met, one sample per call (for samples that cannot be batched,
/// such as a blocking call timed on the host); returns the samples' outcome and appends them.
/// `one` returns a sample's seconds. Warm-up: rule.warmup calls of `one` first, not kept.
template <class F>
sampling_outcome sample_each(const stopping_rule& rule, std::vector<double>& out, F one) {
  for (int i = 0; i < rule.warmup; ++i) (void)one();
  figure_sampler s(rule);
  while (int n = s.next_batch())
    for (int i = 0; i < n; ++i) s.add(one());
  const sampling_outcome o = s.outcome();
  const auto& got = s.seconds();
  out.insert(out.end(), got.begin(), got.end());
  return o;
}

}  // namespace gpu_basics

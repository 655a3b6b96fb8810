// The one measurement strategy: the stopping rule on synthetic timers (a quiet figure stops at
// the minimum, a noisy one runs to its limit, a slow one stops at the timeout and says so), the
// median's confidence interval, and the keys that configure it.
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/sampling.hpp"

namespace gb = gpu_basics;

namespace {

/// A timer whose samples are `typical` times a log-normal factor of spread `sigma`, and a clock
/// that advances by each sample taken (as a wall clock would).
struct synthetic_timer {
  double typical;
  double sigma;
  std::mt19937_64 rng;
  double now = 1000.0;  // any epoch

  synthetic_timer(double t, double s, unsigned seed) : typical(t), sigma(s), rng(seed) {}
  double sample() {
    std::lognormal_distribution<double> f(0.0, sigma);
    const double s = typical * f(rng);
    now += s;
    return s;
  }
  gb::figure_sampler::clock clock() {
    return [this] { return now; };
  }
};

/// Runs the rule over the timer in batches, as copy_bench does; returns the figure_sampler's
/// outcome.
gb::sampling_outcome run(const gb::stopping_rule& rule, synthetic_timer& t,
                         std::vector<int>* batches = nullptr, std::size_t* kept = nullptr) {
  gb::figure_sampler s(rule, t.clock());
  while (const int n = s.next_batch()) {
    if (batches) batches->push_back(n);
    std::vector<double> got;
    for (int i = 0; i < n; ++i) got.push_back(t.sample());
    s.add(got);
  }
  if (kept) *kept = s.seconds().size();
  return s.outcome();
}

}  // namespace

TEST(Sampling, QuietFigureStopsAtTheMinimum) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    synthetic_timer t(0.02, 0.001, seed);  // 0.1% spread: far inside 1%
    std::size_t kept = 0;
    const auto o = run({3, 10, 200, 0.01, 30.0}, t, nullptr, &kept);
    EXPECT_EQ(o.reason, gb::stop_reason::precise) << "seed " << seed;
    EXPECT_EQ(o.samples, 10u);
    EXPECT_EQ(kept, 10u);
    EXPECT_LE(o.noise, 0.01);
    EXPECT_GT(o.noise, 0.0);
  }
}

TEST(Sampling, NoisyFigureRunsToItsLimit) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    synthetic_timer t(0.02, 0.3, seed);  // 30% spread: 1% would need tens of thousands
    const auto o = run({3, 10, 60, 0.01, 30.0}, t);
    EXPECT_EQ(o.reason, gb::stop_reason::max_samples) << "seed " << seed;
    EXPECT_EQ(o.samples, 60u);
    EXPECT_GT(o.noise, 0.01);
  }
}

TEST(Sampling, ModerateNoiseStopsBetweenTheBoundsOncePrecise) {
  // 2% spread: the whole range of ten samples is wider than 1%, but the interval of a few dozen
  // is not.
  int between = 0;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    synthetic_timer t(0.01, 0.02, seed);
    const auto o = run({0, 10, 1000, 0.01, 60.0}, t);
    EXPECT_EQ(o.reason, gb::stop_reason::precise) << "seed " << seed;
    EXPECT_LE(o.noise, 0.01);
    if (o.samples > 10 && o.samples < 1000) ++between;
  }
  EXPECT_EQ(between, 20);
}

TEST(Sampling, TimeoutComesFirstAndIsReported) {
  synthetic_timer t(1.0, 0.3, 7);  // one second a sample, noisy; the timeout is 5 s
  std::size_t kept = 0;
  const auto o = run({3, 10, 100, 0.01, 5.0}, t, nullptr, &kept);
  EXPECT_EQ(o.reason, gb::stop_reason::timeout);
  EXPECT_LT(o.samples, 100u);
  EXPECT_GE(o.elapsed_s, 5.0);
  EXPECT_EQ(kept, o.samples);
  EXPECT_EQ(nlohmann::json(o)["stopped"], "timeout");
}

// Samples taken one at a time (the staged copies' rounds ask after each): a figure whose first
// sample already passes the timeout keeps sampling up to the floor, so compare can judge it.
TEST(Sampling, TheTimeoutLeavesAtLeastTheFloor) {
  synthetic_timer t(2.0, 0.3, 5);  // two seconds a sample; the timeout is 1 s
  gb::figure_sampler s({0, 16, 20, 0.01, 1.0}, t.clock());
  while (s.next_batch() > 0) s.add(t.sample());
  const auto o = s.outcome();
  EXPECT_EQ(o.reason, gb::stop_reason::timeout);
  EXPECT_EQ(o.samples, 10u);
  // A minimum below the floor is the floor; a floor of 1 stops at the first sample.
  synthetic_timer t2(2.0, 0.3, 5);
  gb::figure_sampler few({0, 3, 20, 0.01, 1.0}, t2.clock());
  while (few.next_batch() > 0) few.add(t2.sample());
  EXPECT_EQ(few.outcome().samples, 3u);
  synthetic_timer t3(2.0, 0.3, 5);
  gb::figure_sampler one({0, 16, 20, 0.01, 1.0, 1}, t3.clock());
  while (one.next_batch() > 0) one.add(t3.sample());
  EXPECT_EQ(one.outcome().samples, 1u);
}

TEST(Sampling, AFixedCountTakesExactlyThatMany) {
  synthetic_timer quiet(0.01, 0.0001, 1), slow(100.0, 0.5, 2);  // precise at once; past any timeout
  for (synthetic_timer* t : {&quiet, &slow}) {
    const auto o = run(gb::fixed_count(2, 7), *t);
    EXPECT_EQ(o.samples, 7u);
    EXPECT_EQ(o.reason, gb::stop_reason::max_samples);
  }
  EXPECT_EQ(gb::fixed_count(2, 7).warmup, 2);
}

TEST(Sampling, BatchesFillTheMinimumThenGrowAndNeverPassTheMaximum) {
  synthetic_timer t(0.01, 0.5, 3);
  std::vector<int> batches;
  const auto o = run({0, 10, 37, 0.001, 60.0}, t, &batches);
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches.front(), 10);
  EXPECT_EQ(batches[1], 5);  // half as many again as taken
  int sum = 0;
  for (int b : batches) sum += b;
  EXPECT_EQ(sum, 37);
  EXPECT_EQ(o.samples, 37u);
}

TEST(Sampling, MedianNoiseIsTheOrderStatisticInterval) {
  // Five samples: the interval is the whole range. (5 - 1) / (2 x 3).
  const std::vector<double> five{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(gb::median_noise(five), 4.0 / 6.0);
  // Twenty: ranks 5 and 16 around the median 10.5.
  std::vector<double> twenty;
  for (int i = 20; i >= 1; --i) twenty.push_back(i);
  EXPECT_DOUBLE_EQ(gb::median_noise(twenty), (16.0 - 5.0) / 21.0);
  // It narrows as samples come.
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g(1.0, 0.05);
  std::vector<double> many;
  for (int i = 0; i < 2000; ++i) many.push_back(g(rng));
  const double wide = gb::median_noise(std::span<const double>(many.data(), 20));
  const double narrow = gb::median_noise(many);
  EXPECT_LT(narrow, wide / 4);
  EXPECT_NEAR(narrow, 1.96 * 1.2533 * 0.05 / std::sqrt(2000.0), 0.002);
  // Nothing to go on.
  EXPECT_TRUE(std::isinf(gb::median_noise(std::vector<double>{})));
  EXPECT_TRUE(std::isinf(gb::median_noise(std::vector<double>{0.5})));
  EXPECT_TRUE(std::isinf(gb::median_noise(std::vector<double>{0, 0, 0})));
}

TEST(Sampling, SampleEachWarmsUpWithoutKeeping) {
  int calls = 0;
  std::vector<double> out{99.0};  // appended to, not replaced
  const auto o = gb::sample_each({4, 6, 6, 0.5, 60.0}, out, [&] { return 1.0 + 0.001 * ++calls; });
  EXPECT_EQ(calls, 10);
  ASSERT_EQ(out.size(), 7u);
  EXPECT_DOUBLE_EQ(out[1], 1.005);  // the fifth call: the first kept
  EXPECT_EQ(o.samples, 6u);
}

TEST(Sampling, BadRulesAndSamplesAreRefused) {
  EXPECT_THROW(gb::figure_sampler({0, 0, 5, 0.01, 1}), gb::logic_error);
  EXPECT_THROW(gb::figure_sampler({0, 6, 5, 0.01, 1}), gb::logic_error);
  EXPECT_THROW(gb::figure_sampler({0, 1, 5, 0, 1}), gb::logic_error);
  EXPECT_THROW(gb::figure_sampler({0, 1, 5, 0.01, 0}), gb::logic_error);
  EXPECT_THROW(gb::figure_sampler({0, 1, 5, 0.01, 1, 0}), gb::logic_error);
  gb::figure_sampler s({0, 1, 5, 0.01, 1});
  EXPECT_THROW(s.add(std::nan("")), gb::logic_error);
  const auto r = gb::capped({3, 10, 20, 0.01, 3}, 7);
  EXPECT_EQ(r.max_samples, 7);
  EXPECT_EQ(r.min_samples, 7);
  const auto w = gb::without_warmup(r);
  EXPECT_EQ(w.warmup, 0);
  EXPECT_EQ(w.min_samples, r.min_samples);
  EXPECT_EQ(w.max_samples, r.max_samples);
  EXPECT_EQ(w.timeout_s, r.timeout_s);
}

TEST(Sampling, OutcomeRoundTripsThroughJson) {
  gb::sampling_outcome o{17, 0.004, gb::stop_reason::precise, 0.25};
  const nlohmann::json j = o;
  EXPECT_EQ(j["stopped"], "precise");
  EXPECT_EQ(j.get<gb::sampling_outcome>(), o);
  gb::sampling_outcome inf{1, std::numeric_limits<double>::infinity(), gb::stop_reason::timeout,
                           4.0};
  const nlohmann::json ji = inf;
  EXPECT_TRUE(ji["noise"].is_null());
  EXPECT_TRUE(std::isinf(ji.get<gb::sampling_outcome>().noise));
  EXPECT_THROW((void)nlohmann::json({{"stopped", "bored"}}).get<gb::sampling_outcome>(),
               gb::json_path_error);
}

TEST(Sampling, KeysMakeTheRule) {
  const auto cfg = gb::parse_config(
      "benchmark:\n  iterations: 40\n  min_samples: 8\n  max_noise: 0.02\n  timeout_s: 1.5\n",
      "t.yaml");
  gb::validate(cfg);
  const gb::stopping_rule r = cfg.benchmark.rule();
  EXPECT_EQ(r.max_samples, 40);
  EXPECT_EQ(r.min_samples, 8);
  EXPECT_DOUBLE_EQ(r.max_noise, 0.02);
  EXPECT_DOUBLE_EQ(r.timeout_s, 1.5);
  // Fewer iterations than the default minimum: the maximum is the minimum too.
  const auto few = gb::parse_config("benchmark:\n  iterations: 5\n", "t.yaml");
  gb::validate(few);
  EXPECT_EQ(few.benchmark.rule().min_samples, 5);
  EXPECT_EQ(few.benchmark.rule().max_samples, 5);
  try {
    gb::validate(gb::parse_config("benchmark:\n  max_noise: 0\n", "t.yaml"));
    FAIL() << "max_noise 0 was accepted";
  } catch (const gb::config_error& e) {
    EXPECT_EQ(e.key(), "benchmark.max_noise");
    EXPECT_EQ(e.line(), 2);
  }
}

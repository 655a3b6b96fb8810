#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/stats.hpp"

using namespace gpu_basics;

TEST(Stats, OddCountMedianAndQuartiles) {
  const std::vector<double> v = {5, 1, 4, 2, 3};
  const summary s = summarize(v);
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p25, 2);
  EXPECT_DOUBLE_EQ(s.p75, 4);
  EXPECT_DOUBLE_EQ(s.iqr, 2);
  EXPECT_DOUBLE_EQ(s.rel_spread, 2.0 / 3.0);
  EXPECT_NEAR(s.stdev, std::sqrt(2.5), 1e-12);
}

TEST(Stats, EvenCountMedianInterpolates) {
  const std::vector<double> v = {10, 40, 20, 30};
  const summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median, 25);
  EXPECT_DOUBLE_EQ(s.p25, 17.5);
  EXPECT_DOUBLE_EQ(s.p75, 32.5);
}

TEST(Stats, SingleSample) {
  const std::vector<double> v = {7.5};
  const summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median, 7.5);
  EXPECT_DOUBLE_EQ(s.stdev, 0);
  EXPECT_DOUBLE_EQ(s.rel_spread, 0);
}

TEST(Stats, MedianIsRobustToOneOutlier) {
  std::vector<double> v(99, 1.0);
  v.push_back(1000.0);
  const summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median, 1.0);
  EXPECT_DOUBLE_EQ(s.rel_spread, 0.0);
  EXPECT_GT(s.mean, 10.0);
}

TEST(Stats, QuantileMatchesSortedOrderOnRandomData) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> d(100, 15);
  std::vector<double> v(1001);
  for (auto& x : v) x = d(rng);
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(quantile(v, 0.0), sorted.front());
  EXPECT_DOUBLE_EQ(quantile(v, 1.0), sorted.back());
  EXPECT_DOUBLE_EQ(quantile(v, 0.5), sorted[500]);
  EXPECT_DOUBLE_EQ(quantile(v, 0.1), sorted[100]);
}

TEST(Stats, RejectsEmptyAndNonFinite) {
  EXPECT_THROW((void)summarize(std::vector<double>{}), logic_error);
  EXPECT_THROW((void)summarize(std::vector<double>{1.0, NAN}), logic_error);
  EXPECT_THROW((void)quantile(std::vector<double>{1.0}, 1.5), logic_error);
}

TEST(Stats, MappedSummaryOfBandwidth) {
  const std::vector<double> seconds = {0.002, 0.001, 0.004};
  const summary s =
      summarize_mapped(seconds, [](double t) { return bandwidth_bytes_per_s(1000000, t); });
  EXPECT_DOUBLE_EQ(s.median, 5e8);
  EXPECT_DOUBLE_EQ(s.max, 1e9);
  EXPECT_DOUBLE_EQ(s.min, 2.5e8);
}

TEST(Stats, MeasurementMaths) {
  EXPECT_DOUBLE_EQ(bandwidth_bytes_per_s(1000, 0.5), 2000);
  EXPECT_THROW((void)bandwidth_bytes_per_s(1, 0.0), logic_error);
  EXPECT_DOUBLE_EQ(gemm_flops_per_s(8192, 8192, 8192, 1.0), 2.0 * 8192.0 * 8192.0 * 8192.0);
  EXPECT_DOUBLE_EQ(percent_of(55.0, 63.0), 100.0 * 55.0 / 63.0);
  EXPECT_LT(percent_of(1.0, 0.0), 0.0);
}

TEST(Stats, JsonHasEveryField) {
  const std::vector<double> v = {1, 2, 3};
  const nlohmann::json j = summarize(v);
  for (const char* k :
       {"count", "median", "mean", "min", "max", "stdev", "p25", "p75", "iqr", "rel_spread"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["median"].get<double>(), 2.0);
}

// Figures measured with side series under the one stopping rule (core/sampling_sides.hpp), and
// the "sampling" key the unified, double-buffering and NCCL figures carry: written, read back,
// and absent from results written before the rule.
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/sampling_sides.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/lessons/unified.hpp"

namespace gb = gpu_basics;
namespace gl = gpu_basics::lessons;

namespace {

/// A rule that takes exactly `n` samples after `warmup` runs (precision and timeout far away).
gb::stopping_rule exactly(int warmup, int n) {
  return {warmup, n, n, 1e-9, 1e9};
}

const gb::sampling_outcome kOutcome{5, 0.02, gb::stop_reason::timeout, 1.5};

template <class T>
T round_trip(const T& v) {
  return nlohmann::json::parse(nlohmann::json(v).dump()).get<T>();
}

}  // namespace

TEST(SamplingSides, WarmUpRunsAreInNeitherTheSamplesNorTheSideSeries) {
  std::vector<double> out, side_a, side_b;
  int calls = 0;
  const auto outcome = gb::sample_each_with_sides(exactly(3, 4), out, {&side_a, &side_b}, [&] {
    ++calls;
    side_a.push_back(100.0 + calls);
    side_b.push_back(200.0 + calls);
    return static_cast<double>(calls);
  });
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(outcome.samples, 4u);
  EXPECT_EQ(outcome.reason, gb::stop_reason::max_samples);
  EXPECT_EQ(out, (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(side_a, (std::vector<double>{104, 105, 106, 107}));
  EXPECT_EQ(side_b, (std::vector<double>{204, 205, 206, 207}));
}

TEST(SamplingSides, NoWarmUpKeepsEveryRunAndAppendsToTheSamples) {
  std::vector<double> out{9.0}, side;
  const auto outcome = gb::sample_each_with_sides(exactly(0, 2), out, {&side}, [&] {
    side.push_back(1.0);
    return 0.5;
  });
  EXPECT_EQ(outcome.samples, 2u);
  EXPECT_EQ(out, (std::vector<double>{9.0, 0.5, 0.5}));
  EXPECT_EQ(side, (std::vector<double>{1.0, 1.0}));
}

TEST(SamplingSides, TheRulesCapIsTheMostSamplesAndItsMinimum) {
  // unified.repetitions: 5 under the default rule (16 to 20 samples) gives exactly 5.
  const gb::stopping_rule r = gb::capped(gb::stopping_rule{}, 5);
  std::vector<double> out;
  const auto outcome = gb::sample_each(r, out, [] { return 1.0; });
  EXPECT_EQ(outcome.samples, 5u);
  EXPECT_EQ(out.size(), 5u);
}

TEST(SamplingKey, UnifiedFiguresWriteAndReadTheirSampling) {
  gl::zero_copy_row z{"sparse", 1, 4096, 1e-3, 2e-3, kOutcome};
  EXPECT_TRUE(nlohmann::json(z).contains("sampling"));
  EXPECT_EQ(round_trip(z), z);
  gl::pin_belief p;
  p.sampling = kOutcome;
  EXPECT_EQ(round_trip(p), p);
  gl::pool_threshold_row row{0, 1e-4, 0, kOutcome};
  EXPECT_EQ(round_trip(row), row);
  gl::d2d_point d{1 << 20, 1e12, kOutcome};
  EXPECT_EQ(nlohmann::json(d)["sampling"]["stopped"], "timeout");
  EXPECT_EQ(round_trip(d), d);
}

TEST(SamplingKey, DoubleBufferingAndNcclFiguresWriteAndReadTheirSampling) {
  gl::pipeline_mode_run m{"double", 2, 0.25, {}, kOutcome};
  EXPECT_EQ(round_trip(m), m);
  gl::collective_figure f;
  f.op = "all_reduce";
  f.sampling = kOutcome;
  EXPECT_EQ(nlohmann::json(f)["sampling"]["samples"], 5);
  EXPECT_EQ(round_trip(f), f);
}

TEST(SamplingKey, FiguresWrittenBeforeTheRuleLoadWithoutIt) {
  const auto z = nlohmann::json::parse(
                     R"({"access": "one_pass", "passes": 1, "bytes_read": 8,
                         "mapped_s": 0.5, "copy_then_compute_s": 0.25})")
                     .get<gl::zero_copy_row>();
  EXPECT_EQ(z.mapped_s, 0.5);
  EXPECT_FALSE(z.sampling.has_value());
  const auto d =
      nlohmann::json::parse(R"({"working_set_bytes": 8, "bytes_per_s": 1e9})").get<gl::d2d_point>();
  EXPECT_FALSE(d.sampling.has_value());
  const auto m = nlohmann::json::parse(R"({"name": "serial", "depth": 0, "total_s": 1.0})")
                     .get<gl::pipeline_mode_run>();
  EXPECT_FALSE(m.sampling.has_value());
  const auto f =
      nlohmann::json::parse(R"({"op": "all_gather", "bytes": 64})").get<gl::collective_figure>();
  EXPECT_FALSE(f.sampling.has_value());
  const auto row = nlohmann::json::parse(R"({"release_threshold": 0, "pair_with_sync_s": 1e-4})")
                       .get<gl::pool_threshold_row>();
  EXPECT_FALSE(row.sampling.has_value());
}

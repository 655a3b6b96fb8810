#include <gtest/gtest.h>

#include <cmath>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/profiler/gemm.hpp"

using namespace gpu_basics;

TEST(Gemm, PrecisionNamesRoundTrip) {
  for (gemm_precision p :
       {gemm_precision::fp16, gemm_precision::bf16, gemm_precision::tf32, gemm_precision::fp32})
    EXPECT_EQ(parse_gemm_precision(to_string(p)), p);
  EXPECT_FALSE(parse_gemm_precision("fp8").has_value());
}

TEST(Gemm, PeaksFromTheDatasheet) {
  const auto h200 = *find_datasheet("NVIDIA H200");
  EXPECT_DOUBLE_EQ(datasheet_peak_flops(h200, gemm_precision::bf16), 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops(h200, gemm_precision::fp16), 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops(h200, gemm_precision::tf32), 494e12);
  EXPECT_DOUBLE_EQ(datasheet_peak_flops(h200, gemm_precision::fp32), 67e12);
  // 8192^3 in 1.4 ms is 785 TFLOP/s, 79.4% of 989.
  const double f = gemm_flops_per_s(8192, 8192, 8192, 1.4006e-3);
  EXPECT_NEAR(f / 1e12, 785.0, 0.5);
  EXPECT_NEAR(percent_of(f, datasheet_peak_flops(h200, gemm_precision::bf16)), 79.4, 0.1);
}

TEST(Gemm, RelativeErrorAgainstTheLargestReference) {
  const std::vector<double> ref = {1.0, -4.0, 2.0};
  EXPECT_DOUBLE_EQ(max_relative_error(ref, ref), 0.0);
  const std::vector<double> got = {1.0, -4.0, 2.1};
  EXPECT_NEAR(max_relative_error(got, ref), 0.1 / 4.0, 1e-12);
  const std::vector<double> bad = {1.0, NAN, 2.0};
  EXPECT_TRUE(std::isinf(max_relative_error(bad, ref)));
  EXPECT_THROW((void)max_relative_error(std::vector<double>{1.0}, ref), logic_error);
  EXPECT_LT(gemm_tolerance(gemm_precision::fp32), gemm_tolerance(gemm_precision::fp16));
  EXPECT_GT(gemm_tolerance(gemm_precision::bf16), gemm_tolerance(gemm_precision::fp16));
}

TEST(Gemm, FastestCandidateByMedianSkippingOnesThatDidNotRun) {
  EXPECT_EQ(fastest_candidate({{3.0, 3.0, 3.0}, {}, {1.0, 9.0, 1.1}, {2.0, 2.0, 2.0}}), 2);
  EXPECT_EQ(fastest_candidate({{}, {}}), -1);
  EXPECT_EQ(fastest_candidate({}), -1);
}

TEST(Gemm, InterleavedTuningPicksTheFastestDespiteAClockRamp) {
  // Candidate 2 is truly fastest (1.33 ms); the others run at 1.36-1.43 ms. The GPU's clocks
  // settle over the first 12 runs: each run until then is slower by a share that shrinks as the
  // runs go on, as the candidate times of one H100 run suggest (the first ones timed slowest).
  const std::vector<double> truth = {1.40, 1.36, 1.33, 1.43, 1.38, 1.41};
  int runs = 0;
  const auto time_once = [&](int c) -> std::optional<double> {
    const double ramp = runs < 12 ? 0.12 * (12 - runs) / 12.0 : 0.0;
    ++runs;
    return truth[static_cast<std::size_t>(c)] * 1e-3 * (1 + ramp);
  };
  // One after the other (3 runs each, as before), the candidates timed last look fastest.
  std::vector<std::vector<double>> sequential;
  for (int c = 0; c < 6; ++c) {
    sequential.emplace_back();
    for (int i = 0; i < 3; ++i) sequential.back().push_back(*time_once(c));
  }
  EXPECT_NE(fastest_candidate(sequential), 2);
  runs = 0;
  const auto times = time_candidates_interleaved(6, kTuneRounds, time_once);
  ASSERT_EQ(times.size(), 6u);
  for (const auto& t : times) EXPECT_EQ(t.size(), static_cast<std::size_t>(kTuneRounds));
  EXPECT_EQ(fastest_candidate(times), 2);
  EXPECT_EQ(runs, 6 * kTuneRounds);
  // A candidate that cannot run (in any round) is dropped and not called again.
  int calls_of_1 = 0;
  const auto broken = time_candidates_interleaved(3, 4, [&](int c) -> std::optional<double> {
    if (c == 1 && ++calls_of_1 == 2) return std::nullopt;
    return 1e-3 * (c + 1);
  });
  EXPECT_TRUE(broken[1].empty());
  EXPECT_EQ(calls_of_1, 2);
  EXPECT_EQ(broken[2].size(), 4u);
  EXPECT_EQ(fastest_candidate(broken), 0);
}

TEST(ProfilerConfig, KeysParseAndBadValuesNameTheKey) {
  config c = parse_config(
      "profiler:\n  sample_interval_ms: 50\n  matmul:\n    shapes: [[4096, 2048, 1024]]\n"
      "    precisions: [BF16, fp32]\n",
      "p.yaml");
  validate(c);
  EXPECT_EQ(c.profiler.sample_interval_ms, 50);
  EXPECT_EQ(c.profiler.matmul.shapes[0].dims, (std::vector<std::int64_t>{4096, 2048, 1024}));
  EXPECT_EQ(c.profiler.matmul.precisions, (std::vector<std::string>{"bf16", "fp32"}));
  const std::pair<const char*, const char*> cases[] = {
      {"profiler:\n  sample_interval_ms: 0\n",
       "p.yaml:2:23: profiler.sample_interval_ms: expected an integer in 1..1000"},
      {"profiler:\n  matmul:\n    shapes: [[8192, 8192]]\n",
       "p.yaml:3:14: profiler.matmul.shapes[0]: expected 3 dimensions, got 2"},
      {"profiler:\n  matmul:\n    shapes: [[8192, 0, 8192]]\n",
       "profiler.matmul.shapes[0][1]: expected a dimension in 1..65536, got 0"},
      {"profiler:\n  matmul:\n    precisions: [fp8]\n",
       "p.yaml:3:18: profiler.matmul.precisions[0]: expected one of fp16, bf16, tf32, fp32"},
      {"profiler:\n  matmul:\n    check_size: 4\n",
       "profiler.matmul.check_size: expected an integer in 16..2048, got 4"},
  };
  for (const auto& [yaml, msg] : cases) {
    try {
      validate(parse_config(yaml, "p.yaml"));
      ADD_FAILURE() << yaml << " accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
}

#include <gtest/gtest.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/transfer/multi_gpu.hpp"

using namespace gpu_basics;

TEST(Collectives, BusBandwidthFollowsNcclTests) {
  // nccl-tests: all-reduce busbw = algbw * 2(n-1)/n; all-gather, reduce-scatter: * (n-1)/n.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(collective::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(collective::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(collective::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(collective::all_reduce, 1), 0.0);
  const auto r = collective_bandwidth(collective::all_reduce, 1ull << 30, 0.01, 4);
  EXPECT_DOUBLE_EQ(r.alg_bytes_per_s, (1ull << 30) / 0.01);
  EXPECT_DOUBLE_EQ(r.bus_bytes_per_s, r.alg_bytes_per_s * 1.5);
  EXPECT_EQ(collective_bandwidth(collective::all_gather, 1024, 0.0, 2).alg_bytes_per_s, 0.0);
  EXPECT_THROW((void)bus_bandwidth_factor(collective::all_gather, 0), logic_error);
}

TEST(Collectives, SendCountsSplitTheBufferAsNcclTestsCountsIt) {
  EXPECT_EQ(collective_send_count(collective::all_reduce, 1024, 4, 4), 256u);
  EXPECT_EQ(collective_send_count(collective::all_gather, 1024, 4, 4), 64u);  // each rank sends 1/4
  EXPECT_EQ(collective_send_count(collective::reduce_scatter, 1024, 4, 4), 256u);  // each sends all
  EXPECT_EQ(collective_send_count(collective::all_gather, 8, 4, 4),
            0u);  // 8 B over 4 ranks of floats
  EXPECT_EQ(collective_send_count(collective::all_reduce, 6, 1, 4), 0u);
}

TEST(Collectives, ExpectedValuesAreExactSumsAndGathers) {
  const int n = 3;
  const std::uint64_t count = 5;
  for (std::uint64_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += collective_input(r, i);
    EXPECT_EQ(collective_expected(collective::all_reduce, n, 0, i, count), sum);
  }
  EXPECT_EQ(collective_expected(collective::all_gather, n, 2, 2 * count + 3, count),
            collective_input(2, 3));
  float rs = 0;
  for (int r = 0; r < n; ++r) rs += collective_input(r, 1 * count + 4);
  EXPECT_EQ(collective_expected(collective::reduce_scatter, n, 1, 4, count), rs);
  // One rank: every collective hands back its own input.
  EXPECT_EQ(collective_expected(collective::all_reduce, 1, 0, 9, 10), collective_input(0, 9));
  EXPECT_NE(collective_input(0, 1), collective_input(1, 1));  // ranks' inputs differ
  EXPECT_NE(collective_input(0, 0), collective_input(0, 1));
}

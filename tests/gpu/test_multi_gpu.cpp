// Between GPUs: peer copies over every visible pair, and NCCL collectives over every visible GPU.
// On one GPU the pair is the GPU with itself and the collectives have one rank.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/transfer/nccl.hpp"
#include "gpu_basics/transfer/peer_bench.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;

namespace {
/// One warm-up run, then exactly 3 samples (the timeout far away).
const stopping_rule kThree{1, 3, 3, 0.01, 600.0};

std::vector<int> all_devices() {
  int n = 0;
  GPU_BASICS_CUDA_TRY(cudaGetDeviceCount(&n));
  std::vector<int> d(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) d[static_cast<std::size_t>(i)] = i;
  return d;
}
}  // namespace

TEST(GpuPeer, EveryPairIsMeasuredAndEveryCopyVerified) {
  SKIP_WITHOUT_GPU();
  const auto devs = all_devices();
  const std::uint64_t bytes = 8u << 20;
  const peer_matrices m = measure_peer_matrices(devs, bytes, 4096, kThree);
  ASSERT_EQ(m.cells.size(), devs.size());
  for (std::size_t i = 0; i < devs.size(); ++i)
    for (std::size_t j = 0; j < devs.size(); ++j) {
      const auto& c = m.cells[i][j];
      ASSERT_TRUE(c.uni_off.has_value()) << i << "->" << j;
      ASSERT_TRUE(c.latency_s.has_value()) << i << "->" << j;
      // warm-up + 3 samples of each: one way (x1), both ways (x2), and the latency copies.
      EXPECT_GE(c.verified_bytes, 4 * bytes) << i << "->" << j;
      ASSERT_TRUE(c.uni_off_sampling.has_value());
      EXPECT_EQ(c.uni_off_sampling->samples, 3u);
      EXPECT_EQ(c.uni_off->count, 3u);
      EXPECT_GT(c.latency_s->median, 0.0);
      EXPECT_LT(c.latency_s->median, 1e-3);
      if (i == j) {
        ASSERT_TRUE(c.uni_on.has_value());
        EXPECT_GT(c.uni_on->median, 100e9) << "a copy within one GPU runs at HBM speed";
        EXPECT_EQ(m.can_access[i][j], 1);
      }
      if (c.bidir_on && c.uni_on) {
        EXPECT_GT(c.bidir_on->median, 0.5 * c.uni_on->median);
      }
    }
  std::printf("GPU 0 -> GPU 0: %.0f GB/s one way, %.0f GB/s both ways, %.2f us per 4 KiB copy\n",
              m.cells[0][0].uni_on->median * 1e-9, m.cells[0][0].bidir_on->median * 1e-9,
              m.cells[0][0].latency_s->median * 1e6);
}

TEST(GpuNccl, CollectivesOnEveryGpuAreVerifiedAtOddAndLargeSizes) {
  SKIP_WITHOUT_GPU();
  std::string why;
  auto nccl = nccl_collectives::open(all_devices(), &why);
  if (!nccl) GTEST_SKIP() << why;
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  const int n = nccl->ranks();
  std::printf("NCCL %s, %d rank(s)\n", nccl->version().c_str(), n);
  for (collective op : {collective::all_reduce, collective::all_gather, collective::reduce_scatter})
    for (std::uint64_t bytes : {std::uint64_t{8}, std::uint64_t{4100}, std::uint64_t{64} << 20}) {
      const auto c = nccl->run(op, bytes, kThree);
      EXPECT_EQ(c.bytes % (4u * static_cast<unsigned>(n)), 0u);
      EXPECT_LE(c.bytes, std::max<std::uint64_t>(bytes, 4u * static_cast<unsigned>(n)));
      EXPECT_GT(c.verified_elements, 0u) << to_string(op) << " " << bytes;
      EXPECT_EQ(c.sampling.samples, 3u);
      EXPECT_EQ(c.time_s.count, 3u);
      EXPECT_GT(c.time_s.median, 0.0);
      EXPECT_GT(c.rate.alg_bytes_per_s, 0.0);
      if (n == 1) {
        EXPECT_EQ(c.rate.bus_bytes_per_s, 0.0);
      }
      if (bytes == (64u << 20))
        std::printf("%s 64 MiB: %.1f us, algbw %.1f GB/s, busbw %.1f GB/s\n",
                    std::string(to_string(op)).c_str(), c.time_s.median * 1e6,
                    c.rate.alg_bytes_per_s * 1e-9, c.rate.bus_bytes_per_s * 1e-9);
    }
}

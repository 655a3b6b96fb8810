#include <gtest/gtest.h>

#include "gpu_basics/core/hardware.hpp"

using namespace gpu_basics;

TEST(Hardware, PcieRatesAfterEncoding) {
  EXPECT_NEAR(*pcie_link_bytes_per_s(5, 16), 63.015e9, 0.01e9);  // 32 GT/s * 16 * 128/130 / 8
  EXPECT_NEAR(*pcie_link_bytes_per_s(4, 16), 31.508e9, 0.01e9);
  EXPECT_NEAR(*pcie_link_bytes_per_s(3, 8), 7.877e9, 0.01e9);
  EXPECT_DOUBLE_EQ(*pcie_link_bytes_per_s(1, 1), 2.5e8);
  EXPECT_FALSE(pcie_link_bytes_per_s(7, 16).has_value());
  EXPECT_FALSE(pcie_link_bytes_per_s(5, 0).has_value());
  EXPECT_FALSE(pcie_link_bytes_per_s(5, 64).has_value());
}

TEST(Hardware, DatasheetLookupByDeviceName) {
  const auto h200 = find_datasheet("NVIDIA H200");
  ASSERT_TRUE(h200.has_value());
  EXPECT_DOUBLE_EQ(h200->bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(h200->hbm_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(find_datasheet("NVIDIA H100 80GB HBM3")->hbm_bytes_per_s, 3.35e12);
  EXPECT_FALSE(find_datasheet("NVIDIA GeForce GTX 1080").has_value());
}

// GPU tests (ctest label `gpu`): skip with the reason where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/core/shared_gpu.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;

TEST(GpuDevice, QueryIsPlausibleAndAgreesWithNvml) {
  SKIP_WITHOUT_GPU();
  std::string why;
  const auto nv = nvml::open(&why);
  const device_info d = query_device(0, nv.get());
  EXPECT_FALSE(d.name.empty());
  EXPECT_GE(d.compute_capability_major, 7);
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GT(d.l2_cache_bytes, 0u);
  EXPECT_GT(d.copy_engines, 0);
  EXPECT_GT(d.max_sm_clock_mhz, 0);
  EXPECT_LE(d.free_memory_bytes, d.total_memory_bytes);
  EXPECT_GT(d.free_memory_bytes, 0u);
  ASSERT_TRUE(nv) << why;
  const auto h = nv->device_by_pci_bus_id(d.pci_bus_id);
  ASSERT_TRUE(h.ok());
  const auto name = nv->name(h.value);
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name.value, d.name);  // the CUDA device and the NVML device are the same GPU
  const auto mem = nv->memory(h.value);
  ASSERT_TRUE(mem.ok());
  // NVML counts a little memory the runtime reserves; the two totals agree within 2%.
  EXPECT_NEAR(static_cast<double>(mem.value.total_bytes), static_cast<double>(d.total_memory_bytes),
              0.02 * static_cast<double>(d.total_memory_bytes));
  EXPECT_TRUE(d.pcie_generation_max.has_value());
  EXPECT_TRUE(d.driver_version.has_value());
  EXPECT_THROW((void)query_device(d.index + 1000, nv.get()), no_device_error);
}

TEST(GpuDevice, NvmlListsThisProcessWithItsContext) {
  SKIP_WITHOUT_GPU();
  std::string why;
  const auto nv = nvml::open(&why);
  ASSERT_TRUE(nv) << why;
  const device_info d = query_device(0, nv.get());
  device_buffer held(256ull << 20);  // a context and memory of this process on the device
  const auto h = nv->device_by_pci_bus_id(d.pci_bus_id);
  ASSERT_TRUE(h.ok());
  const auto listed = nv->compute_processes(h.value);
  ASSERT_TRUE(listed.ok()) << to_string(listed.status);
  ASSERT_FALSE(listed.value.empty());  // this process, at least
  const auto self = static_cast<unsigned>(getpid());
  const auto it = std::find_if(listed.value.begin(), listed.value.end(),
                               [&](const nvml_process& p) { return p.pid == self; });
  if (it != listed.value.end() && it->used_bytes) {  // in the driver's PID namespace
    EXPECT_GE(*it->used_bytes, 256ull << 20);
  }
  // The others are the list without this process, whichever namespace the PIDs are of.
  EXPECT_EQ(neighbours_of(listed.value, self).pids.size(), listed.value.size() - 1);
}

TEST(GpuRaii, RandomDataRoundTripsThroughDeviceAndPinnedBuffers) {
  SKIP_WITHOUT_GPU();
  constexpr std::size_t n = (32u << 20) / sizeof(std::uint32_t) + 7;  // not a round size
  std::vector<std::uint32_t> src(n), back(n, 0);
  std::mt19937 rng(1234);
  for (auto& x : src) x = static_cast<std::uint32_t>(rng());
  pinned_buffer pinned(n * sizeof(std::uint32_t));
  device_buffer a(n * sizeof(std::uint32_t)), b(n * sizeof(std::uint32_t));
  cuda_stream s;
  cuda_event start, stop;
  std::memcpy(pinned.data(), src.data(), n * sizeof(std::uint32_t));
  start.record(s);
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(a.data(), pinned.data(), a.size(), cudaMemcpyHostToDevice, s.value()));
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(b.data(), a.data(), a.size(), cudaMemcpyDeviceToDevice, s.value()));
  std::memset(pinned.data(), 0, pinned.size());
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyAsync(pinned.data(), b.data(), b.size(), cudaMemcpyDeviceToHost, s.value()));
  stop.record(s);
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GT(cuda_event::elapsed_ms(start, stop), 0.0f);
  std::memcpy(back.data(), pinned.data(), pinned.size());
  EXPECT_EQ(src, back);
}

TEST(GpuRaii, ImpossibleAllocationIsTypedOutOfMemory) {
  SKIP_WITHOUT_GPU();
  try {
    device_buffer huge(std::size_t{1} << 50);  // 1 PiB
    FAIL() << "1 PiB allocation succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested_bytes(), std::size_t{1} << 50);
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos);
  }
  device_buffer ok(1 << 20);  // the failure did not poison the context
  EXPECT_NE(ok.data(), nullptr);
}

TEST(GpuCli, InfoPrintsTheDeviceAndWritesParseableJson) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_cli_info";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cmd = std::string(GPU_BASICS_CLI) + " info --json " +
                          (dir / "info.json").string() + " > " + (dir / "out.txt").string() +
                          " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream j(dir / "info.json"), t(dir / "out.txt");
  const auto info = nlohmann::json::parse(j);
  std::stringstream text;
  text << t.rdbuf();
  const device_info d = query_device(0, nullptr);
  ASSERT_GE(info["results"]["info"]["gpus"].size(), 1u);
  EXPECT_EQ(info["results"]["info"]["gpus"][0]["name"], d.name);
  EXPECT_EQ(info["results"]["info"]["gpus"][0]["sm_count"], d.sm_count);
  EXPECT_TRUE(info["results"]["info"]["gpus"][0]["total_memory_bytes"].is_number_integer());
  EXPECT_EQ(info["environment"]["config"]["device"], 0);
  EXPECT_NE(text.str().find(d.name), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("copy engines"), std::string::npos);
  std::filesystem::remove_all(dir);
}

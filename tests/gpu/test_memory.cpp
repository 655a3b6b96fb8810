// The allocators on the GPU: record_stream preventing early reuse (and the test catching it when
// it is missing), pinned copies verified, the memory lesson. What the caching allocator keeps
// over every backend is in test_allocator_contract.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"
#include "gpu_basics/memory/pinned_pool.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;

namespace {
stream_handle handle(const cuda_stream& s) {
  return reinterpret_cast<stream_handle>(s.value());
}

}  // namespace

namespace {
/// Frees a block still being written by a held kernel on another stream, allocates the same size
/// again and writes it; returns the bytes of the new block that the late writer spoiled.
unsigned long long reuse_while_in_use(bool use_record_stream, bool* same_block) {
  caching_allocator a(std::make_shared<cuda_device_backend>());
  cuda_stream owner, other;
  const std::size_t n = 8u << 20;
  void* first = a.allocate(n, handle(owner));
  {
    stream_blocker hold(10.0);
    hold.block(other);                         // `other` will write `first` later...
    enqueue_fill_pattern(first, n, 1, other);  // ...once released
    if (use_record_stream) a.record_stream(first, handle(other));
    a.deallocate(first);
    void* second = a.allocate(n, handle(owner));
    *same_block = second == first;
    enqueue_fill_pattern(second, n, 2, owner);
    owner.synchronize();
    hold.release();
    other.synchronize();
    const auto bad = gpu_basics::testing::device_mismatches(second, n, 2, owner);
    a.deallocate(second);
    return bad;
  }
}
}  // namespace

TEST(GpuAllocator, RecordStreamKeepsABlockFromBeingReusedWhileAnotherStreamUsesIt) {
  SKIP_WITHOUT_GPU();
  bool same = true;
  EXPECT_EQ(reuse_while_in_use(true, &same), 0u);
  EXPECT_FALSE(same);
  // Without record_stream the block is handed out again at once and the late writer spoils it:
  // the check above would see the race.
  EXPECT_GT(reuse_while_in_use(false, &same), 0u);
  EXPECT_TRUE(same);
}

TEST(GpuPinnedPool, PooledPinnedBlocksCarryVerifiedCopiesBothWays) {
  SKIP_WITHOUT_GPU();
  for (pinning_method m : {pinning_method::host_alloc, pinning_method::host_register}) {
    pinned_host_pool pool(std::make_shared<cuda_pinned_backend>(m));
    cuda_stream s;
    const std::size_t n = (12u << 20) + 3;
    device_buffer d(n);
    for (int round = 0; round < 3; ++round) {
      void* up = pool.allocate(n);
      void* down = pool.allocate(n);
      fill_pattern_host(up, n, static_cast<std::uint32_t>(round));
      std::memset(down, 0, n);
      GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(d.data(), up, n, cudaMemcpyHostToDevice, s.value()));
      pool.record_stream(up, handle(s));
      EXPECT_EQ(
          gpu_basics::testing::device_mismatches(d.data(), n, static_cast<std::uint32_t>(round), s),
          0u);
      GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(down, d.data(), n, cudaMemcpyDeviceToHost, s.value()));
      s.synchronize();
      EXPECT_EQ(count_pattern_mismatches_host(down, n, static_cast<std::uint32_t>(round)), 0u);
      pool.deallocate(up);
      pool.deallocate(down);
    }
    const auto st = pool.stats();
    EXPECT_EQ(st.backend_allocations, 2);  // rounds 2 and 3 reused the blocks
    EXPECT_GE(st.cache_hits, 4);
    EXPECT_GT(st.pin_seconds, 0.0);
  }
}

TEST(GpuCli, MemoryLessonRuns) {
  SKIP_WITHOUT_GPU();
  const std::string cmd =
      std::string(GPU_BASICS_CLI) +
      " memory --set benchmark.iterations=3 --set 'transfer.tensor_shapes=[[1024, 1024]]'"
      " --json /tmp/gpu_basics_memory.json > /tmp/gpu_basics_memory.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in("/tmp/gpu_basics_memory.json");
  const auto doc = nlohmann::json::parse(in);
  std::map<std::string, nlohmann::json> tables;
  for (const auto& t : doc["tables"]) tables[t["id"].get<std::string>()] = t;
  for (const char* id :
       {"allocation_cost", "caching", "peak", "pinned_vs_pageable", "fragmentation"})
    ASSERT_TRUE(tables.count(id)) << id;
  for (const auto& row :
       tables["allocation_cost"]["rows"])  // a cache hit beats cudaMalloc+cudaFree
    EXPECT_GT(row["speedup_vs_cuda_malloc"].get<double>(), 10.0) << row.dump();
  const auto& steps = tables["caching"]["rows"];
  EXPECT_EQ(steps[0]["device_allocations"], steps[2]["device_allocations"]);  // hits: no cudaMalloc
  EXPECT_EQ(steps[1]["allocated_bytes"], 0);
  EXPECT_EQ(steps[1]["reserved_bytes"], steps[0]["reserved_bytes"]);  // freed memory stays cached
  EXPECT_EQ(steps[3]["reserved_bytes"], 0);                           // until empty_cache
  const auto& frag = tables["fragmentation"]["rows"];
  EXPECT_EQ(frag[0]["second_64mib"], "a new segment (cudaMalloc)");
  EXPECT_EQ(frag[1]["second_64mib"], "the cache");
}

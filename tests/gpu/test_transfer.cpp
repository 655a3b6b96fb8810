// Transfer measurements on the GPU: every copy verified, async semantics, streams, staging.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"
#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/staged_copy.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;
using gpu_basics::testing::device_mismatches;

namespace {}  // namespace

TEST(GpuTransfer, DeviceCheckerCountsPlantedCorruption) {
  SKIP_WITHOUT_GPU();
  const std::size_t bytes = (3u << 20) + 3;  // a tail of 3 bytes past the last word
  device_buffer d(bytes);
  cuda_stream s;
  enqueue_fill_pattern(d.data(), bytes, 42, s);
  s.synchronize();
  EXPECT_EQ(device_mismatches(d.data(), bytes, 42), 0u);
  // Corrupt 5 bytes: one in a word, two in another word, and the last (tail) byte.
  std::vector<std::size_t> at = {17, 1000000, 1000001, 2222222, bytes - 1};
  for (auto i : at) {
    std::uint8_t b = 0;
    GPU_BASICS_CUDA_TRY(cudaMemcpy(&b, d.as<std::uint8_t>() + i, 1, cudaMemcpyDeviceToHost));
    b ^= 0x10;
    GPU_BASICS_CUDA_TRY(cudaMemcpy(d.as<std::uint8_t>() + i, &b, 1, cudaMemcpyHostToDevice));
  }
  EXPECT_EQ(device_mismatches(d.data(), bytes, 42), at.size());
  // The host and device patterns agree byte for byte.
  std::vector<std::uint8_t> h(bytes);
  enqueue_fill_pattern(d.data(), bytes, 43, s);
  s.synchronize();
  GPU_BASICS_CUDA_TRY(cudaMemcpy(h.data(), d.data(), bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(count_pattern_mismatches_host(h.data(), bytes, 43), 0u);
  // Zero poison never passes.
  enqueue_fill_zero(d.data(), bytes, s);
  s.synchronize();
  EXPECT_EQ(device_mismatches(d.data(), bytes, 43), bytes);
}

TEST(GpuTransfer, EveryCopyKindMovesVerifiedData) {
  SKIP_WITHOUT_GPU();
  copy_bench bench({1, 3, 3});
  const std::uint64_t bytes = (4u << 20) + 13;
  for (copy_direction d : {copy_direction::h2d, copy_direction::d2h})
    for (host_memory m : {host_memory::pinned, host_memory::pageable}) {
      const auto r = bench.copy(d, m, bytes);
      EXPECT_EQ(r.seconds.size(), 3u);
      EXPECT_EQ(r.verified_bytes, 3 * bytes);
      EXPECT_GT(r.bandwidth_bytes_per_s.median, 1e8) << to_string(d) << " " << to_string(m);
      EXPECT_LT(r.bandwidth_bytes_per_s.median, 2e11) << "faster than any PCIe link";
    }
  const auto d2d = bench.copy(copy_direction::d2d, host_memory::pinned, bytes);
  EXPECT_GT(d2d.bandwidth_bytes_per_s.median, 1e10);
  const auto bi = bench.bidirectional(bytes);
  EXPECT_EQ(bi.bytes_moved, 2 * bytes);
  ASSERT_EQ(bi.seconds_joint.size(), bi.seconds.size());
  for (std::size_t i = 0; i < bi.seconds.size(); ++i)        // the sum of concurrent rates is never
    EXPECT_LE(bi.seconds[i], bi.seconds_joint[i] * 1.0001);  // slower than the joint time
  EXPECT_EQ(bi.verified_bytes, 6 * bytes);
}

TEST(GpuTransfer, MultiStreamMovesTheSameBytesAsOne) {
  SKIP_WITHOUT_GPU();
  copy_bench bench({1, 3, 3});
  const std::uint64_t bytes = (16u << 20) + 4097;
  for (copy_direction d : {copy_direction::h2d, copy_direction::d2h}) {
    const auto one = bench.multi_stream(d, bytes, 1);
    const auto four = bench.multi_stream(d, bytes, 4);
    EXPECT_EQ(one.streams, 1u);
    EXPECT_EQ(four.streams, 4u);
    EXPECT_EQ(one.bytes_moved, four.bytes_moved);
    EXPECT_EQ(four.verified_bytes, one.verified_bytes);
  }
  // A copy too small for 64 chunks of 64 KiB uses fewer streams instead of failing.
  const auto few = bench.multi_stream(copy_direction::h2d, 256u << 10, 64);
  EXPECT_EQ(few.streams, 4u);
}

TEST(GpuTransfer, AsyncFromPinnedReturnsBeforeTheCopyEndsFromPageableItDoesNot) {
  SKIP_WITHOUT_GPU();
  copy_bench bench({1, 8, 10});
  const std::uint64_t bytes = 256u << 20;
  const auto pinned = bench.sync_vs_async(copy_direction::h2d, host_memory::pinned, bytes);
  const auto pageable = bench.sync_vs_async(copy_direction::h2d, host_memory::pageable, bytes);
  // Informational figures: capped below the rule's minimum.
  EXPECT_EQ(pinned.sampling.samples, std::uint64_t{copy_bench::kSyncAsyncSamples});
  EXPECT_EQ(pageable.sampling.samples, std::uint64_t{copy_bench::kSyncAsyncSamples});
  EXPECT_LT(pinned.async_call_s.median, 0.1 * pinned.async_copy_s.median)
      << "call " << pinned.async_call_s.median << " s, copy " << pinned.async_copy_s.median << " s";
  EXPECT_GT(pinned.async_free_s.median, 0.5 * pinned.async_copy_s.median);
  EXPECT_GT(pageable.async_call_s.median, 0.5 * pageable.async_copy_s.median)
      << "call " << pageable.async_call_s.median << " s, copy " << pageable.async_copy_s.median
      << " s";
  EXPECT_GE(pinned.sync_call_s.median,
            0.9 * pinned.async_copy_s.median);  // sync waits for the copy
}

TEST(GpuStaged, UploadAndDownloadAreByteExactForAnySizeAndStores) {
  SKIP_WITHOUT_GPU();
  for (const store_mode m :
       {store_mode::off, store_mode::uploads, store_mode::downloads, store_mode::both}) {
    staging_options o;
    o.chunk_bytes = 1u << 20;
    o.buffers = 2;
    o.threads = 4;
    o.streaming_stores = m;
    // The upload's DMA enqueued while copying the next chunk, and (plain stores) between chunks.
    o.enqueue_while_copying = m != store_mode::off;
    staged_copier copier(o);
    cuda_stream s;
    for (std::size_t bytes : {std::size_t{1}, std::size_t{4095}, std::size_t{(1u << 20) + 1},
                              std::size_t{(5u << 20) + 777}, std::size_t{7u << 20}}) {
      const auto seed = static_cast<std::uint32_t>(bytes) + static_cast<std::uint32_t>(m);
      // One byte in: the host buffers' odd alignment reaches the streaming copy's edges.
      std::vector<std::uint8_t> src(bytes + 1), back(bytes + 1, 0);
      fill_pattern_host(src.data() + 1, bytes, seed);
      device_buffer d(bytes);
      enqueue_fill_zero(d.data(), bytes, s);
      copier.upload(d.data(), src.data() + 1, bytes, s);
      s.synchronize();
      EXPECT_EQ(device_mismatches(d.data(), bytes, seed), 0u) << bytes << " " << to_string(m);
      copier.download(back.data() + 1, d.data(), bytes, s);
      EXPECT_EQ(back, src) << bytes << " " << to_string(m);
    }
  }
}

TEST(GpuStaged, RefillingAStagingBufferBeforeItsDmaCorruptsAndTheCheckSeesIt) {
  SKIP_WITHOUT_GPU();
  // Hold the stream so no DMA runs while upload() refills the ring: without the wait on each
  // buffer's event, chunks 0 and 1 are overwritten by chunks 2 and 3 before they are sent.
  staging_options o;
  o.chunk_bytes = 1u << 20;
  o.buffers = 2;
  o.threads = 2;
  const std::size_t bytes = 4u << 20;
  std::vector<std::uint8_t> src(bytes);
  fill_pattern_host(src.data(), bytes, 99);
  device_buffer d(bytes);
  cuda_stream s;
  {
    staged_copier racy(o);
    racy.set_wait_for_dma_for_testing(false);
    stream_blocker hold(5.0);
    hold.block(s);
    racy.upload(d.data(), src.data(), bytes, s);
    hold.release();
    s.synchronize();
    EXPECT_FALSE(hold.timed_out());
  }
  EXPECT_GT(device_mismatches(d.data(), bytes, 99), bytes / 4);
  {
    staged_copier safe(o);
    stream_blocker hold(0.5);  // the safe copier waits on the held DMA until this times out
    hold.block(s);
    safe.upload(d.data(), src.data(), bytes, s);
    hold.release();
    s.synchronize();
  }
  EXPECT_EQ(device_mismatches(d.data(), bytes, 99), 0u);
}

TEST(GpuStaged, StagedUploadBeatsPageableCudaMemcpy) {
  SKIP_WITHOUT_GPU();
  copy_bench bench({1, 5, 5});
  const std::uint64_t bytes = 256u << 20;
  const auto plain = bench.copy(copy_direction::h2d, host_memory::pageable, bytes);
  const auto staged = bench.staged(copy_direction::h2d, bytes, staging_options{});
  const auto down = bench.staged(copy_direction::d2h, bytes, staging_options{});
  EXPECT_GT(staged.verified_bytes, 0u);
  EXPECT_GT(down.verified_bytes, 0u);
  // Not a speed target (that lives in the lesson's table): a sanity check that staging is used.
  EXPECT_GT(staged.bandwidth_bytes_per_s.median, plain.bandwidth_bytes_per_s.median);
}

TEST(GpuStaged, InterleavedChoicesEachGetTheirOwnVerifiedRepetitions) {
  SKIP_WITHOUT_GPU();
  copy_bench bench({2, 4, 4});
  const std::uint64_t bytes = (24u << 20) + 4093;  // not a whole number of chunks or pages
  staging_options a, b, c;
  b.threads = 1;
  b.chunk_bytes = 256u << 10;
  c.streaming_stores = store_mode::both;
  c.buffers = 2;
  const std::vector<staging_options> choices{a, b, c};
  for (const auto d : {copy_direction::h2d, copy_direction::d2h}) {
    const auto m = bench.staged(d, bytes, choices);
    ASSERT_EQ(m.size(), choices.size());
    for (const auto& x : m) {
      EXPECT_EQ(x.direction, d);
      EXPECT_EQ(x.bytes, bytes);
      EXPECT_EQ(x.seconds.size(), 4u);  // the repetitions, not the warm-ups
      // one warm-up round (several choices interleave: copy_bench::staged) and 4 kept rounds
      EXPECT_EQ(x.verified_bytes, bytes * 5);
      EXPECT_GT(x.bandwidth_bytes_per_s.median, 0.0);
    }
  }
  EXPECT_THROW(bench.staged(copy_direction::h2d, bytes, std::span<const staging_options>{}),
               gpu_basics::logic_error);
  EXPECT_THROW(bench.staged(copy_direction::d2d, bytes, choices), gpu_basics::logic_error);
}

TEST(GpuCli, TransferLessonWritesEveryTable) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_cli_transfer";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cmd =
      std::string(GPU_BASICS_CLI) +
      " transfer --set 'transfer.tensor_shapes=[[512, 512], [1000, 999]]'"
      " --set 'transfer.large_copy_bytes=16 MiB' --set benchmark.iterations=3"
      " --set transfer.sweep.enabled=true --set 'transfer.sweep.max_bytes=1 MiB'"
      " --set 'transfer.multi_gpu.peer_bytes=16 MiB' --set 'transfer.multi_gpu.nccl_max_bytes=1 "
      "MiB'"
      " --json " +
      (dir / "t.json").string() + " --csv " + (dir / "t.csv").string() + " > " +
      (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream j(dir / "t.json");
  const auto doc = nlohmann::json::parse(j);
  std::set<std::string> ids;
  for (const auto& t : doc["tables"]) ids.insert(t["id"].get<std::string>());
  for (const char* id :
       {"bandwidth", "d2d", "sync_async", "streams", "pageable_upload", "host_register", "sweep",
        "p2p_access", "p2p_bandwidth", "p2p_bidirectional", "p2p_latency", "nccl"})
    EXPECT_TRUE(ids.count(id)) << id;
  const auto& bw = doc["tables"][0];
  ASSERT_EQ(bw["id"], "bandwidth");
  EXPECT_EQ(bw["rows"].size(), 2u * 2u * 2u);
  for (const auto& row : bw["rows"]) {
    EXPECT_TRUE(row["median_bytes_per_s"].is_number());
    EXPECT_GT(row["median_bytes_per_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(bw["rows"][4]["bytes"], 1000 * 999 * 4);  // rows: shape x direction x memory
  EXPECT_TRUE(std::filesystem::exists(dir / "t.bandwidth.csv"));
  std::filesystem::remove_all(dir);
}

// The prefetch pipeline on the GPU: checksums at every depth, the release wait proven
// necessary, timelines that overlap, and the lesson's trace file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/transfer/pipeline.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;

namespace {
struct batches {
  std::size_t bytes, n;
  pinned_buffer host;
  std::vector<const void*> ptrs;
  batches(std::size_t b, std::size_t count) : bytes(b), n(count), host(b * count) {
    for (std::size_t i = 0; i < n; ++i) {
      auto* p = static_cast<std::byte*>(host.data()) + i * bytes;
      fill_pattern_host(p, bytes, static_cast<std::uint32_t>(i));
      ptrs.push_back(p);
    }
  }
};

/// Runs the pipeline with the LCG compute; returns how many batches' checksums were wrong.
int wrong_checksums(prefetch_pipeline& pipe, const batches& b, unsigned k, bool serial,
                    pipeline_run* out = nullptr) {
  device_buffer sums(b.n * sizeof(unsigned long long));
  GPU_BASICS_CUDA_TRY(cudaMemset(sums.data(), 0, sums.size()));
  const auto compute = [&](stream_view s, const void* dev, std::size_t i) {
    enqueue_lcg_checksum(dev, b.bytes, k, sums.as<unsigned long long>() + i, s);
  };
  auto run = serial ? pipe.run_serial(b.ptrs, compute) : pipe.run(b.ptrs, compute);
  std::vector<unsigned long long> got(b.n);
  GPU_BASICS_CUDA_TRY(cudaMemcpy(got.data(), sums.data(), sums.size(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (std::size_t i = 0; i < b.n; ++i)
    bad += got[i] != lcg_checksum_of_pattern(b.bytes, static_cast<std::uint32_t>(i), k);
  if (out) *out = std::move(run);
  return bad;
}
}  // namespace

TEST(GpuPipeline, ChecksumsMatchAtEveryDepth) {
  SKIP_WITHOUT_GPU();
  batches b(8u << 20, 7);  // fewer batches than some depths' multiples, and one more than 2 * 3
  for (std::size_t depth : {1u, 2u, 3u, 8u}) {
    prefetch_pipeline pipe(b.bytes, depth);
    EXPECT_EQ(wrong_checksums(pipe, b, 64, false), 0) << depth;
  }
  prefetch_pipeline one(b.bytes, 1);
  EXPECT_EQ(wrong_checksums(one, b, 64, true), 0) << "serial";
}

TEST(GpuPipeline, WithoutTheReleaseWaitTheChecksumsCatchTheRace) {
  SKIP_WITHOUT_GPU();
  batches b(16u << 20, 8);
  prefetch_pipeline pipe(b.bytes, 2);
  pipe.set_wait_for_release_for_testing(false);
  // Compute much slower than the copy: the copy stream runs ahead and refills buffers in use.
  EXPECT_GT(wrong_checksums(pipe, b, 20000, false), 0);
  pipe.set_wait_for_release_for_testing(true);
  EXPECT_EQ(wrong_checksums(pipe, b, 20000, false), 0);
}

TEST(GpuPipeline, CopiesOverlapComputeAndTheOverlapShortensTheRun) {
  SKIP_WITHOUT_GPU();
  batches b(32u << 20, 8);
  prefetch_pipeline pipe(b.bytes, 2), ser(b.bytes, 1);
  pipeline_run dbl, serial;
  // Compute comparable to the copy, so that overlapping them saves a share of the run far above
  // the events' jitter; the first runs warm both pipelines up.
  constexpr unsigned k = 2000;
  ASSERT_EQ(wrong_checksums(pipe, b, k, false), 0);
  ASSERT_EQ(wrong_checksums(ser, b, k, true), 0);
  ASSERT_EQ(wrong_checksums(pipe, b, k, false, &dbl), 0);
  ASSERT_EQ(wrong_checksums(ser, b, k, true, &serial), 0);
  int overlapped = 0;
  for (std::size_t i = 0; i + 1 < dbl.batches.size(); ++i)
    overlapped += dbl.batches[i + 1].copy_start_s < dbl.batches[i].compute_end_s;
  EXPECT_GT(overlapped, 0);
  for (std::size_t i = 0; i + 1 < serial.batches.size(); ++i)  // serial never overlaps
    EXPECT_GE(serial.batches[i + 1].copy_start_s, serial.batches[i].compute_end_s - 1e-6);
  // Not a speed target: the pipelined run's wall time is shorter than its own copies and
  // computes laid end to end, which only overlap achieves (the serial run cannot).
  const auto busy = [](const pipeline_run& r) {
    double t = 0;
    for (const auto& x : r.batches)
      t += (x.copy_end_s - x.copy_start_s) + (x.compute_end_s - x.compute_start_s);
    return t;
  };
  EXPECT_LT(dbl.total_s, 0.9 * busy(dbl)) << "serial run: " << serial.total_s << " s";
  EXPECT_GE(serial.total_s, busy(serial) - 1e-5);  // events resolve about 0.5 us
}

TEST(GpuCli, TransferWritesTheDoubleBufferTableAndTrace) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_db";
  std::filesystem::remove_all(dir);
  const std::string cmd =
      std::string(GPU_BASICS_CLI) +
      " transfer --set 'transfer.tensor_shapes=[[256, 256]]' --set 'transfer.large_copy_bytes=8 "
      "MiB'"
      " --set benchmark.iterations=3 --set 'transfer.double_buffer.batch_bytes=8 MiB'"
      " --set transfer.double_buffer.batches=6 --set 'transfer.double_buffer.compute_to_copy=[0.5, "
      "1, 2]'"
      " --set output.directory=" +
      dir.string() + " --json " + (dir / "t.json").string() + " > " + (dir.string() + ".txt") +
      " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream j(dir / "t.json");
  const auto doc = nlohmann::json::parse(j);
  nlohmann::json table;
  for (const auto& t : doc["tables"])
    if (t["id"] == "double_buffer") table = t;
  ASSERT_FALSE(table.is_null());
  ASSERT_EQ(table["rows"].size(), 3u);
  for (const auto& row : table["rows"]) EXPECT_GT(row["speedup"].get<double>(), 1.0) << row.dump();
  std::ifstream tr(dir / "double_buffer_trace.json");
  const auto trace = nlohmann::json::parse(tr);
  std::set<std::pair<std::int64_t, std::int64_t>> tracks;
  std::set<std::int64_t> named_threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") tracks.insert({e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()});
    if (e["name"] == "thread_name") named_threads.insert(e["tid"].get<std::int64_t>());
  }
  // serial: one track; double and triple: a copy track and a compute track each.
  EXPECT_EQ(tracks.size(), 5u);
  EXPECT_EQ(named_threads, (std::set<std::int64_t>{1, 2}));
}

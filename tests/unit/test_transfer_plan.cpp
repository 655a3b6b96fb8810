#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/transfer/host_copy.hpp"
#include "gpu_basics/transfer/plan.hpp"

using namespace gpu_basics;

namespace {
void expect_covers(const std::vector<chunk>& cs, std::uint64_t bytes) {
  std::uint64_t next = 0;
  for (const auto& c : cs) {
    EXPECT_EQ(c.offset, next);
    EXPECT_GT(c.bytes, 0u);
    next = c.offset + c.bytes;
  }
  EXPECT_EQ(next, bytes);
}
}  // namespace

TEST(Plan, SplitEvenCoversTheCopyOnAlignedBoundaries) {
  for (std::uint64_t bytes : {1ull, 4095ull, 4096ull, 1000000ull, (256ull << 20) + 13}) {
    for (unsigned parts : {1u, 2u, 3u, 4u, 7u, 64u}) {
      const auto cs = split_even(bytes, parts, 4096);
      expect_covers(cs, bytes);
      EXPECT_LE(cs.size(), parts);
      for (std::size_t i = 0; i + 1 < cs.size(); ++i) EXPECT_EQ(cs[i + 1].offset % 4096, 0u);
    }
  }
}

TEST(Plan, SplitEvenGivesFewerChunksWhenTooSmall) {
  EXPECT_EQ(split_even(4096 * 3, 8, 4096).size(), 3u);
  EXPECT_EQ(split_even(100, 8, 4096).size(), 1u);
  const auto cs = split_even(256ull << 20, 4, 4096);
  ASSERT_EQ(cs.size(), 4u);
  for (const auto& c : cs) EXPECT_EQ(c.bytes, 64ull << 20);
  EXPECT_TRUE(split_even(0, 4).empty());
  EXPECT_THROW((void)split_even(10, 0), logic_error);
}

TEST(Plan, SplitFixedLastChunkShorter) {
  const auto cs = split_fixed(10 * 1024 + 5, 4096);
  ASSERT_EQ(cs.size(), 3u);
  EXPECT_EQ(cs[2], (chunk{8192, 2053}));
  expect_covers(cs, 10 * 1024 + 5);
  EXPECT_EQ(split_fixed(8192, 4096).size(), 2u);
  EXPECT_THROW((void)split_fixed(10, 0), logic_error);
}

TEST(Plan, PowerOfTwoSweep) {
  EXPECT_EQ(power_of_two_sweep(4096, 65536),
            (std::vector<std::uint64_t>{4096, 8192, 16384, 32768, 65536}));
  EXPECT_EQ(power_of_two_sweep(3000, 9000), (std::vector<std::uint64_t>{4096, 8192}));
  EXPECT_EQ(power_of_two_sweep(5000, 6000), (std::vector<std::uint64_t>{5000}));
  EXPECT_EQ(power_of_two_sweep(1ull << 30, 1ull << 30).size(), 1u);
  EXPECT_THROW((void)power_of_two_sweep(10, 5), logic_error);
}

TEST(Plan, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(4096), "4 KiB");
  EXPECT_EQ(format_bytes(256ull << 20), "256 MiB");
  EXPECT_EQ(format_bytes(3ull << 29), "1.5 GiB");
}

TEST(Pattern, NoZeroBytesAndSeedsDiffer) {
  std::vector<std::uint8_t> a(4099), b(4099);
  fill_pattern_host(a.data(), a.size(), 1);
  fill_pattern_host(b.data(), b.size(), 2);
  for (auto x : a) EXPECT_NE(x, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(count_pattern_mismatches_host(a.data(), a.size(), 1), 0u);
  EXPECT_GT(count_pattern_mismatches_host(a.data(), a.size(), 2), 4000u);
}

TEST(Pattern, CountsEveryCorruptedByteAtAnyOffset) {
  std::vector<std::uint8_t> a(10007);
  fill_pattern_host(a.data(), a.size(), 9);
  std::mt19937 rng(3);
  std::vector<std::size_t> hit;
  for (int i = 0; i < 37; ++i) hit.push_back(rng() % a.size());
  std::sort(hit.begin(), hit.end());
  hit.erase(std::unique(hit.begin(), hit.end()), hit.end());
  for (auto i : hit) a[i] ^= 0x40;
  EXPECT_EQ(count_pattern_mismatches_host(a.data(), a.size(), 9), hit.size());
  // A sub-range checked at its own offset, unaligned at both ends.
  std::vector<std::uint8_t> whole(1000), part(333);
  fill_pattern_host(whole.data(), whole.size(), 5);
  fill_pattern_host(part.data(), part.size(), 5, 101);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 101));
  EXPECT_EQ(count_pattern_mismatches_host(whole.data() + 101, 333, 5, 101), 0u);
}

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  thread_pool pool(4);
  EXPECT_EQ(pool.size(), 4u);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(hits.size(), [&](std::size_t i) { hits[i]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

// Loops back to back, fewer tasks than threads: a worker that is slow to check out of one loop
// must not take a task of the next (each loop counts its own tasks). Both hand-overs: spinning
// workers, and workers that sleep at once.
TEST(ThreadPool, BackToBackLoopsNeverShareTasks) {
  for (const auto spin : {std::chrono::microseconds{0}, std::chrono::microseconds{500}}) {
    thread_pool pool(6, spin);
    std::vector<int> counts(3000 * 4, 0);
    std::atomic<std::size_t> total{0};
    for (std::size_t loop = 0; loop < 3000; ++loop) {
      const std::size_t tasks = 1 + loop % 4;
      pool.parallel_for(tasks, [&, loop](std::size_t i) {
        ++counts[loop * 4 + i];  // distinct per task: a repeated task shows as 2
        total.fetch_add(1, std::memory_order_relaxed);
      });
      if (loop % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // sleepers
    }
    std::size_t expected = 0;
    for (std::size_t loop = 0; loop < 3000; ++loop)
      for (std::size_t i = 0; i < 4; ++i) {
        const int want = i < 1 + loop % 4 ? 1 : 0;
        expected += static_cast<std::size_t>(want);
        ASSERT_EQ(counts[loop * 4 + i], want) << "loop " << loop << " task " << i;
      }
    EXPECT_EQ(total.load(), expected);
  }
}

TEST(ThreadPool, RangesCoverTheBufferAndCopyIt) {
  thread_pool pool(3);
  std::vector<std::uint8_t> src(1 << 20), dst(src.size(), 0);
  fill_pattern_host(src.data(), src.size(), 77);
  const std::size_t n = src.size() - 5;
  pool.parallel_ranges(n, 64, [&](std::size_t off, std::size_t len) {
    std::memcpy(dst.data() + off, src.data() + off, len);
  });
  EXPECT_EQ(count_pattern_mismatches_host(dst.data(), n, 77), 0u);
  EXPECT_EQ(dst[n], 0);
}

TEST(ThreadPool, PiecesPerThreadCutTheBufferIntoThatManyAlignedRangesCoveringIt) {
  thread_pool pool(3);
  std::vector<std::uint8_t> src(1 << 20), dst(src.size(), 0);
  fill_pattern_host(src.data(), src.size(), 5);
  const std::size_t n = src.size() - 100;
  std::mutex m;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  pool.parallel_ranges(
      n, 64,
      [&](std::size_t off, std::size_t len) {
        std::memcpy(dst.data() + off, src.data() + off, len);
        std::lock_guard lock(m);
        ranges.emplace_back(off, len);
      },
      4);
  EXPECT_EQ(ranges.size(), 12u);  // 3 threads x 4
  std::sort(ranges.begin(), ranges.end());
  std::size_t at = 0;
  for (const auto& [off, len] : ranges) {
    EXPECT_EQ(off, at);
    EXPECT_EQ(off % 64, 0u);
    at += len;
  }
  EXPECT_EQ(at, n);
  EXPECT_EQ(count_pattern_mismatches_host(dst.data(), n, 5), 0u);
  // Never more ranges than aligned units.
  ranges.clear();
  pool.parallel_ranges(
      200, 64,
      [&](std::size_t off, std::size_t len) {
        std::lock_guard lock(m);
        ranges.emplace_back(off, len);
      },
      8);
  EXPECT_EQ(ranges.size(), 4u);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  thread_pool pool(4);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](std::size_t i) {
                                   if (i == 57) throw std::runtime_error("x");
                                 }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](std::size_t) { ++n; });  // still usable
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, CallerFirstRunsOnceOnTheCallerWhileTheWorkersTakeTasks) {
  thread_pool pool(4);
  const auto me = std::this_thread::get_id();
  std::atomic<int> done{0};
  int calls = 0;
  bool workers_ran_meanwhile = false;
  pool.parallel_for(
      200, [&](std::size_t) { ++done; },
      [&] {
        ++calls;
        EXPECT_EQ(std::this_thread::get_id(), me);
        // The loop is already handed out: the workers finish tasks while this runs.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (done.load() == 0 && std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
        workers_ran_meanwhile = done.load() > 0;
      });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(workers_ran_meanwhile);
  EXPECT_EQ(done.load(), 200);
  // Without workers, or without tasks, it still runs once, first.
  for (const auto& [threads, tasks] : {std::pair{1u, 5u}, std::pair{4u, 0u}, std::pair{4u, 1u}}) {
    thread_pool small(threads);
    std::vector<int> order;
    small.parallel_for(
        tasks, [&](std::size_t) { order.push_back(1); }, [&] { order.push_back(0); });
    ASSERT_EQ(order.size(), tasks + 1);
    EXPECT_EQ(order.front(), 0);
  }
}

TEST(ThreadPool, CallerFirstsExceptionComesAfterEveryTaskIsDone) {
  thread_pool pool(4);
  std::atomic<int> done{0};
  int done_when_caught = -1;
  try {
    pool.parallel_ranges(
        1 << 20, 64, [&](std::size_t, std::size_t) { ++done; }, 4,
        [] { throw std::runtime_error("enqueue failed"); });
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "enqueue failed");
    done_when_caught = done.load();
  }
  EXPECT_EQ(done_when_caught, 16);  // 4 threads x 4 pieces, all finished first
  // Still usable.
  pool.parallel_for(10, [&](std::size_t) { ++done; });
  EXPECT_EQ(done.load(), 26);
  // The same on the caller alone.
  thread_pool one(1);
  EXPECT_THROW(one.parallel_for(
                   3, [&](std::size_t) { ++done; }, [] { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 29);
}

TEST(ThreadPool, SingleThreadRunsOnTheCaller) {
  thread_pool pool(1);
  const auto me = std::this_thread::get_id();
  pool.parallel_for(5, [&](std::size_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
}

TEST(ByteSize, ParsesUnits) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("4 KiB"), 4096u);
  EXPECT_EQ(parse_byte_size("8MiB"), 8u << 20);
  EXPECT_EQ(parse_byte_size("1 gib"), 1ull << 30);
  EXPECT_EQ(parse_byte_size("1.5 GB"), 1500000000u);
  EXPECT_FALSE(parse_byte_size("1.5 B").has_value());
  EXPECT_FALSE(parse_byte_size("lots").has_value());
  EXPECT_FALSE(parse_byte_size("4 parsecs").has_value());
  EXPECT_FALSE(parse_byte_size("-4").has_value());
}

TEST(ByteSize, ReadsDecimalsWithAUnitRoundedToTheNearestByte) {
  // 8.8 * 2^30 = 9448928051.2: not a whole number of bytes, which the parser once refused.
  EXPECT_EQ(parse_byte_size("8.8GiB"), 9448928051u);
  EXPECT_EQ(parse_byte_size("8.6GiB"), 9234179686u);  // 9234179686.4
  EXPECT_EQ(parse_byte_size("8.75GiB"), 9395240960u);
  EXPECT_EQ(parse_byte_size("9.5GB"), 9500000000u);
  EXPECT_EQ(parse_byte_size("9000MiB"), 9437184000u);
  EXPECT_EQ(parse_byte_size("9448928051"), 9448928051u);
  EXPECT_EQ(parse_byte_size("1.5 KiB"), 1536u);
  EXPECT_EQ(parse_byte_size(".5KiB"), 512u);
  EXPECT_EQ(parse_byte_size("0.0005 KiB"), 1u);  // 0.512 rounds up
  EXPECT_EQ(parse_byte_size("0.0004 KiB"), 0u);  // 0.4096 rounds down
  EXPECT_EQ(parse_byte_size("0.0005 kB"), 1u);   // exactly a half: up
  EXPECT_EQ(parse_byte_size("4096.0"), 4096u);   // a whole number written with a point
  EXPECT_EQ(parse_byte_size("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_byte_size("16777215.9999999999999999999 TiB"), std::nullopt);  // 19+ places
  EXPECT_EQ(parse_byte_size("16777215.999999999 TiB"), 18446744073709551615ull - 1099);
}

TEST(ByteSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"1.5",
                          "1.5 B",
                          "-1GiB",
                          "+1GiB",
                          "1e3GiB",
                          "1E3",
                          "99999999999TiB",
                          "18446744073709551616",
                          "16777216 TiB",
                          "",
                          " ",
                          "GiB",
                          ".",
                          "5.",
                          "5.GiB",
                          "1..5GiB",
                          "1.5.5GiB",
                          "nan",
                          "inf",
                          "NaN GiB",
                          "infGiB",
                          "0x10",
                          "8.8 GiB ",
                          " 8.8GiB",
                          "8.8 gibibytes",
                          "1,5 GiB"})
    EXPECT_EQ(parse_byte_size(bad), std::nullopt) << quote_for_message(bad);
}

TEST(ByteSize, ConfigurationSizesTakeDecimalsToo) {
  EXPECT_EQ(
      parse_config("transfer:\n  large_copy_bytes: 1.5 GiB\n", "t.yaml").transfer.large_copy_bytes,
      3ull << 29);
  EXPECT_THROW((void)parse_config("transfer:\n  large_copy_bytes: 1610612736.5\n", "t.yaml"),
               config_error);
}

TEST(ByteSize, EchoesTheUnitGiven) {
  EXPECT_EQ(echo_byte_size("8.8GiB"), "8.8 GiB");
  EXPECT_EQ(echo_byte_size("9.5GB"), "9.5 GB");
  EXPECT_EQ(echo_byte_size("9000MiB"), "9000 MiB");
  EXPECT_EQ(echo_byte_size("9448928051"), "9448928051 B");
  EXPECT_EQ(echo_byte_size("8.80  gib"), "8.80 GiB");
  EXPECT_EQ(echo_byte_size("1.5 kb"), "1.5 kB");
  EXPECT_EQ(echo_byte_size("12 b"), "12 B");
  EXPECT_EQ(echo_byte_size("1.5"), std::nullopt);
  EXPECT_EQ(echo_byte_size("lots"), std::nullopt);
}

TEST(TransferConfig, KeysParseAndValidate) {
  config c = parse_config(
      "transfer:\n  large_copy_bytes: 256 MiB\n  sweep: {enabled: true, min_bytes: 4 KiB, "
      "max_bytes: 1 MiB}\n"
      "  staging: {chunk_bytes: 4 MiB, buffers: 2, threads: 8}\n",
      "t.yaml");
  validate(c);
  EXPECT_EQ(c.transfer.large_copy_bytes, 256u << 20);
  EXPECT_EQ(c.transfer.sweep.enabled, std::optional<bool>(true));
  EXPECT_EQ(c.transfer.sweep.max_bytes, 1u << 20);
  EXPECT_EQ(c.transfer.staging.chunk_bytes, 4u << 20);
  EXPECT_EQ(c.transfer.staging.threads, 8);
}

TEST(TransferConfig, SweepIsAutoByDefaultAndTakesTrueFalseOrAuto) {
  EXPECT_EQ(config{}.transfer.sweep.enabled, std::nullopt);
  EXPECT_EQ(parse_config("transfer:\n  sweep: {enabled: false}\n", "t.yaml").transfer.sweep.enabled,
            std::optional<bool>(false));
  EXPECT_EQ(parse_config("transfer:\n  sweep: {enabled: auto}\n", "t.yaml").transfer.sweep.enabled,
            std::nullopt);
  try {
    (void)parse_config("transfer:\n  sweep: {enabled: sometimes}\n", "t.yaml");
    FAIL() << "accepted 'sometimes'";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected true, false or auto"), std::string::npos);
  }
}

TEST(TransferConfig, BadValuesNameKeyAndLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"transfer:\n  sweep:\n    min_bytes: 1 MiB\n    max_bytes: 4 KiB\n",
       "t.yaml:4:16: transfer.sweep.max_bytes: must be at least"},
      {"transfer:\n  staging:\n    buffers: 1\n",
       "t.yaml:3:14: transfer.staging.buffers: expected an integer in 2..16, got 1"},
      {"transfer:\n  staging:\n    chunk_bytes: 1 KiB\n",
       "t.yaml:3:18: transfer.staging.chunk_bytes: expected a size in 64 KiB..1 GiB"},
      {"transfer:\n  large_copy_bytes: huge\n",
       "t.yaml:2:21: transfer.large_copy_bytes: expected a size in 1 MiB..64 GiB"},
      {"transfer:\n  large_copy_bytes: 65 GiB\n",
       "t.yaml:2:21: transfer.large_copy_bytes: expected a size"},
  };
  for (const auto& [yaml, msg] : cases) {
    try {
      validate(parse_config(yaml, "t.yaml"));
      ADD_FAILURE() << yaml << " accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
  }
}

TEST(HostCopy, StreamingCopyMatchesMemcpyAtEveryAlignmentAndLength) {
  // Random bytes; every source and destination offset within a cache line, lengths around the
  // 32-byte stores and 128-byte blocks, and guard bytes on both sides that must stay untouched.
  std::mt19937_64 rng(31);
  std::vector<std::uint8_t> src(4096 + 128), dst(4096 + 256), want;
  for (auto& b : src) b = static_cast<std::uint8_t>(rng());
  const std::size_t lengths[] = {0, 1, 31, 32, 33, 63, 64, 127, 128, 129, 255, 256, 1000, 4095};
  for (std::size_t so = 0; so < 64; so += 7)
    for (std::size_t dof = 0; dof < 64; ++dof)
      for (std::size_t n : lengths) {
        std::fill(dst.begin(), dst.end(), std::uint8_t{0xA5});
        want = dst;
        std::memcpy(want.data() + 64 + dof, src.data() + so, n);
        copy_streaming(dst.data() + 64 + dof, src.data() + so, n);
        ASSERT_EQ(dst, want) << "source offset " << so << ", destination offset " << dof << ", "
                             << n << " bytes";
      }
}

TEST(HostCopy, StreamingCopyOfManyMegabytes) {
  std::mt19937_64 rng(32);
  std::vector<std::uint64_t> src((9u << 20) / 8 + 3), dst(src.size() + 1, 0);
  for (auto& v : src) v = rng();
  const std::size_t bytes = src.size() * 8 - 5;
  copy_streaming(reinterpret_cast<std::byte*>(dst.data()) + 3, src.data(), bytes);
  EXPECT_EQ(std::memcmp(reinterpret_cast<std::byte*>(dst.data()) + 3, src.data(), bytes), 0);
#if defined(__x86_64__)
  EXPECT_EQ(streaming_copy_supported(), __builtin_cpu_supports("avx2") != 0);
#else
  EXPECT_FALSE(streaming_copy_supported());
#endif
}

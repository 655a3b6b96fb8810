// core's shared helpers: the error types, the dlopen helper, the event-poll loop, the host clock.
#include <gtest/gtest.h>

#include <type_traits>

#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/dynamic_library.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/event_poll.hpp"

using namespace gpu_basics;

namespace {
[[noreturn]] void throw_oom() {
  throw out_of_memory("cannot allocate 8 GiB of device memory", 8ull << 30);
}
}  // namespace

TEST(Errors, OutOfMemoryIsABadAllocCaughtAsAnyException) {
  try {
    throw_oom();
  } catch (const std::bad_alloc& e) {  // code written for any allocator sees it...
    EXPECT_STREQ(e.what(), "cannot allocate 8 GiB of device memory");  // ...with the message
  }
  bool caught = false;
  try {
    throw_oom();
  } catch (const std::exception& e) {  // one std::exception base: a plain catch sees it
    caught = true;
    const auto* oom = dynamic_cast<const out_of_memory*>(&e);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->requested_bytes(), 8ull << 30);
    EXPECT_STREQ(e.what(), "cannot allocate 8 GiB of device memory");
  }
  EXPECT_TRUE(caught);
  static_assert(std::is_base_of_v<std::bad_alloc, out_of_memory>);
  static_assert(!std::is_base_of_v<error, out_of_memory>);
}

TEST(Errors, NcclErrorIsItsOwnTypeAndNamesTheCall) {
  try {
    throw nccl_error(3, "internal error", "ncclAllReduce", "nccl.cpp", 42);
  } catch (const cuda_error&) {
    FAIL() << "an NCCL failure is not a CUDA error";
  } catch (const error& e) {
    const auto* n = dynamic_cast<const nccl_error*>(&e);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->code(), 3);
    EXPECT_STREQ(e.what(), "ncclAllReduce failed: NCCL error 3 (internal error) at nccl.cpp:42");
  }
}

TEST(DynamicLibrary, BindsTheFirstSymbolItExportsAndNamesWhatIsMissing) {
  const dynamic_library lib({"libgpu_basics_no_such_library.so", "libc.so.6"});
  ASSERT_TRUE(lib);
  EXPECT_EQ(lib.path(), "libc.so.6");
  std::size_t (*len)(const char*) = nullptr;
  EXPECT_TRUE(lib.bind(len, {"no_such_symbol_v2", "strlen"}));  // newest name first
  ASSERT_NE(len, nullptr);
  EXPECT_EQ(len("four"), 4u);
  int (*none)() = nullptr;
  EXPECT_FALSE(lib.bind(none, {"no_such_symbol"}));
  EXPECT_EQ(none, nullptr);
  try {
    lib.bind_required(none, {"no_such_symbol_v2", "no_such_symbol"});
    FAIL() << "bind_required must throw";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "libc.so.6 lacks no_such_symbol_v2 or no_such_symbol");
  }
  dynamic_library later;  // as NVML and NCCL hold theirs: empty, then assigned
  EXPECT_FALSE(later);
  later = dynamic_library({"libc.so.6"});
  EXPECT_TRUE(later);
  dynamic_library taken(std::move(later));
  EXPECT_TRUE(taken);
  EXPECT_EQ(taken.path(), "libc.so.6");
}

TEST(DynamicLibrary, NoCandidateLoadsThrowsNamingThemAll) {
  try {
    dynamic_library lib({"libgpu_basics_a.so", "libgpu_basics_b.so"});
    FAIL() << "must throw";
  } catch (const error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot load libgpu_basics_a.so or libgpu_basics_b.so"), std::string::npos)
        << what;
  }
}

TEST(EventPoll, CompletesTheDoneEntriesAndKeepsTheRest) {
  std::vector<std::pair<int, char>> pending = {{1, 'a'}, {2, 'b'}, {3, 'c'}, {4, 'd'}, {5, 'e'}};
  std::string completed;
  const auto n = poll_completed(
      pending, [](const auto& e) { return e.first % 2 == 1; },
      [&](const auto& e) { completed += e.second; });
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(completed.size(), 3u);
  for (char c : {'a', 'c', 'e'}) EXPECT_NE(completed.find(c), std::string::npos);
  ASSERT_EQ(pending.size(), 2u);
  for (const auto& e : pending) EXPECT_EQ(e.first % 2, 0);
  // complete() runs after its entry is removed, so it may add entries (polled in the same pass).
  std::vector<int> grow = {1};
  poll_completed(
      grow, [](int v) { return v == 1; }, [&](int) { grow.push_back(7); });
  EXPECT_EQ(grow, std::vector<int>{7});
  const auto never = [](int) { return false; };
  EXPECT_EQ(poll_completed(grow, never, [](int) {}), 0u);
}

TEST(HostClock, SecondsAndNanosecondsAreOneMonotonicClock) {
  const std::uint64_t ns0 = host_clock_ns();
  const double s = host_seconds();
  const std::uint64_t ns1 = host_clock_ns();
  EXPECT_LE(ns0, ns1);
  EXPECT_GE(s * 1e9, static_cast<double>(ns0) - 1e3);
  EXPECT_LE(s * 1e9, static_cast<double>(ns1) + 1e3);
}

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gpu_basics/core/input_file.hpp"

namespace {
std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "input_file";
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}
std::string message_of(const std::string& path, std::uint64_t cap) {
  try {
    (void)gpu_basics::read_input_file(path, cap, "results file");
  } catch (const gpu_basics::format_error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(InputFile, ReadsARegularFileWhole) {
  const std::string path = temp_path("random.bin");
  std::mt19937 rng(11);
  std::string bytes(3u << 20, '\0');  // more than one read chunk
  for (auto& c : bytes) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(gpu_basics::read_input_file(path, 4u << 20, "results file"), bytes);
  EXPECT_EQ(message_of(path, 1u << 20),
            path +
                ": larger than 1 MiB, the limit for a results file (GPU_BASICS_MAX_INPUT_MIB "
                "raises it)");
}

TEST(InputFile, AReaderGoesOverTheFileInChunksAndAgainFromTheStart) {
  const std::string path = temp_path("chunks.bin");
  std::mt19937 rng(12);
  std::string bytes(100000, '\0');
  for (auto& c : bytes) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << bytes;
  gpu_basics::input_reader in(path, 1u << 20, "snapshot pickle");
  EXPECT_EQ(in.size(), bytes.size());
  for (int pass = 0; pass < 2; ++pass) {
    std::string got;
    char chunk[4096];
    while (const std::size_t n = in.read(chunk, 1 + got.size() % sizeof chunk))
      got.append(chunk, n);
    EXPECT_EQ(got, bytes) << "pass " << pass;
    in.rewind();
  }
  // A file that grows past the cap while it is read is refused there.
  gpu_basics::input_reader small(path, bytes.size(), "snapshot pickle");
  std::ofstream(path, std::ios::binary | std::ios::app) << "more";
  std::string sink(bytes.size() + 4, '\0');
  std::size_t got = 0;
  try {
    while (const std::size_t n = small.read(sink.data() + got, sink.size() - got)) got += n;
    ADD_FAILURE() << "read past the cap";
  } catch (const gpu_basics::format_error& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
}

TEST(InputFile, RefusesWhatIsNotARegularFileAtOnce) {
  const std::string fifo = temp_path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const double t0 = gpu_basics::host_seconds();  // no writer: opening must not wait for one
  EXPECT_EQ(message_of(fifo, 1u << 20),
            fifo + ": is not a regular file (a FIFO); give a results file");
  EXPECT_LT(gpu_basics::host_seconds() - t0, 1.0);
  EXPECT_EQ(message_of("/dev/zero", 1u << 20),
            "/dev/zero: is not a regular file (a character device); give a results file");
  EXPECT_EQ(
      message_of(::testing::TempDir(), 1u << 20).find("is not a regular file (a directory)") !=
          std::string::npos,
      true);
  EXPECT_EQ(message_of(temp_path("missing.json"), 1u << 20),
            temp_path("missing.json") + ": cannot be read: no such file");
}

TEST(InputFile, TheCapCanBeRaisedAndABadOneIsNamed) {
  ASSERT_EQ(setenv("GPU_BASICS_MAX_INPUT_MIB", "3", 1), 0);
  EXPECT_EQ(gpu_basics::input_size_cap(1024), 3u << 20);
  for (const char* bad : {"0", "-1", "2x", "99999999999999999999"}) {
    ASSERT_EQ(setenv("GPU_BASICS_MAX_INPUT_MIB", bad, 1), 0);
    EXPECT_THROW((void)gpu_basics::input_size_cap(1024), gpu_basics::format_error) << bad;
  }
  ASSERT_EQ(unsetenv("GPU_BASICS_MAX_INPUT_MIB"), 0);
  EXPECT_EQ(gpu_basics::input_size_cap(1024), 1024u);
}

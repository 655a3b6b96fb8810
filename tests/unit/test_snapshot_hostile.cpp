// Snapshots and options built to hurt `replay` and `advise`: each is refused with one line and
// exit 2 (or bounded), whatever the sizes, the streams or the repetitions in it.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/snapshot/pickle.hpp"

#include "cli.hpp"
#include "exit_codes.hpp"
#include "run.hpp"
#include "snapshot_test_util.hpp"

using namespace snapshot_test;

namespace {

struct outcome {
  int code = 0;
  std::string out, err;
  double seconds = 0;
};

outcome run_args(std::vector<std::string> args) {
  args.insert(args.begin(), "gpu-basics");
  std::ostringstream o, e;
  outcome r;
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = gb::cli::parse(args, o, e);
  r.code = p.opts ? gb::cli::run(*p.opts, o, e) : p.exit_code;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.out = o.str();
  r.err = e.str();
  return r;
}

std::string write_snapshot(const std::string& name, pk::items events) {
  const auto path = scratch("hostile_" + name) / "s.pickle";
  write_bytes(path, pk::dumps(snapshot_of_trace(std::move(events))));
  return path.string();
}

}  // namespace

TEST(HostileSnapshot, ASizeNoGpuHoldsIsAnInputErrorAtOnce) {
  // One allocation of 2^46 bytes (64 TiB) once took half a minute and 675 MiB of the host; 2^62
  // ran out of host memory (exit 6). Both are input errors now, refused before any replay.
  for (const std::int64_t bytes : {std::int64_t{1} << 46, std::int64_t{1} << 62}) {
    const auto snap = write_snapshot("huge", {trace_event("alloc", 0x1000, bytes),
                                              trace_event("free_completed", 0x1000, bytes)});
    const auto json = (std::filesystem::path(snap).parent_path() / "a.json").string();
    for (const char* command : {"advise", "replay"}) {
      const auto r = run_args({command, snap, "--json", json});
      EXPECT_EQ(r.code, gb::cli::exit_usage) << command << ": " << r.err;
      EXPECT_NE(r.err.find("more than any GPU has"), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_LT(r.seconds, 5.0) << command;
      EXPECT_FALSE(std::filesystem::exists(json));
    }
  }
}

TEST(HostileSnapshot, ATraceOfNothingToReplayGivesNoAdvice) {
  // Only actions the replay does not know ("snapshot", "oom") and segment events: no advice
  // ("peak 0.0 MiB, the defaults are best") may come of it.
  const auto snap = write_snapshot(
      "unknown", {trace_event("snapshot", 0, 0), trace_event("segment_alloc", 0x1000, 2 * MiB),
                  trace_event("oom", 0, 4 * MiB)});
  for (const char* command : {"advise", "replay"}) {
    const auto r = run_args({command, snap});
    EXPECT_EQ(r.code, gb::cli::exit_usage) << command << ": " << r.out;
    EXPECT_NE(r.err.find("holds no allocation or free to replay"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(HostileSnapshot, RepeatedFitLimitsAreReplayedOnceAndTooManyRefused) {
  const std::string snap = kData + "/snapshot_small.pickle";
  std::vector<std::string> args = {"advise", snap, "--json", "-"};
  for (int i = 0; i < 400; ++i) args.insert(args.end(), {"--fit", "1GiB"});
  const auto r = run_args(args);
  ASSERT_EQ(r.code, gb::cli::exit_ok) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["fit_limits_bytes"], nlohmann::json::array({1ull << 30}));
  std::vector<std::string> many = {"advise", snap};
  for (int i = 1; i <= 17; ++i) many.insert(many.end(), {"--fit", std::to_string(i) + "GiB"});
  const auto m = run_args(many);
  EXPECT_EQ(m.code, gb::cli::exit_usage);
  EXPECT_NE(m.err.find("--fit: 17 different limits; at most 16"), std::string::npos) << m.err;
}

TEST(HostileSnapshot, AFractionNeedsTheDevicesMemory) {
  const std::string snap = kData + "/snapshot_small.pickle";
  const auto r = run_args({"replay", snap, "--policy", "per_process_memory_fraction:0.5"});
  EXPECT_EQ(r.code, gb::cli::exit_usage);
  EXPECT_NE(r.err.find("--device-memory"), std::string::npos) << r.err;
  // With it, the fraction is a limit on that device: half of 100 MiB under a 54 MiB peak.
  const auto g = run_args({"replay", snap, "--policy", "per_process_memory_fraction:0.5",
                           "--device-memory", "100MiB", "--json", "-"});
  ASSERT_EQ(g.code, gb::cli::exit_ok) << g.err;
  const auto j = nlohmann::json::parse(g.out);
  EXPECT_EQ(j["device_memory_bytes"], 100 * MiB);
  const auto& last = j["policies"].back();
  EXPECT_EQ(last["conf"], "per_process_memory_fraction:0.5");
  EXPECT_TRUE(last["peak_reserved_bytes"].is_null() ||
              last["peak_reserved_bytes"].get<std::uint64_t>() <= 50 * MiB)
      << last.dump();
  // --device-memory and --device are one or the other.
  const auto both = run_args({"replay", snap, "--device-memory", "80GiB", "--device", "x.json"});
  EXPECT_EQ(both.code, gb::cli::exit_usage);
}

TEST(HostileSnapshot, DeviceMemoryComesFromASavedInfoResult) {
  const std::string snap = kData + "/snapshot_small.pickle";
  const auto r = run_args(
      {"advise", snap, "--fit", "30MiB", "--device", kData + "/h200_all.json", "--json", "-"});
  ASSERT_EQ(r.code, gb::cli::exit_ok) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device_memory_bytes"], 150109880320ull);  // the H200's, as `info` recorded it
  const auto bad = run_args({"advise", snap, "--device", snap});
  EXPECT_EQ(bad.code, gb::cli::exit_usage) << bad.err;
}

TEST(HostileSnapshot, APyTorchThatRefusesTheLineStopsItBeingPrinted) {
  if (!have_python()) GTEST_SKIP() << "no python3";
  // A stand-in torch whose parser refuses expandable_segments and writes down what it read.
  const auto dir = scratch("torch_check");
  std::filesystem::create_directories(dir / "torch" / "cuda");
  write_bytes(dir / "torch" / "__init__.py",
              "import os\n"
              "class _C:\n"
              "    @staticmethod\n"
              "    def _accelerator_setAllocatorSettings(conf):\n"
              "        open(os.environ['SEEN'], 'w').write(conf)\n"
              "        if os.environ.get('REFUSE') and os.environ['REFUSE'] in conf:\n"
              "            raise RuntimeError('Unrecognized key ' + os.environ['REFUSE'])\n");
  ASSERT_EQ(setenv("PYTHONPATH", dir.c_str(), 1), 0);
  ASSERT_EQ(setenv("SEEN", (dir / "seen.txt").c_str(), 1), 0);
  const std::string snap = kData + "/h200_torch_snapshot.pickle";
  const auto ok = run_args({"advise", snap, "--torch-python", "python3", "--json", "-"});
  EXPECT_EQ(ok.code, gb::cli::exit_ok) << ok.err;
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(read_bytes(dir / "seen.txt"), j["recommended"]["use_conf"].get<std::string>());
  // The fraction the shell would compute is read as a stand-in number.
  const auto fit = run_args({"advise", snap, "--fit", "240MiB", "--torch-python", "python3"});
  EXPECT_EQ(fit.code, gb::cli::exit_ok) << fit.err;
  EXPECT_NE(read_bytes(dir / "seen.txt").find("per_process_memory_fraction:0.5"), std::string::npos)
      << read_bytes(dir / "seen.txt");
  ASSERT_EQ(setenv("REFUSE", "per_process_memory_fraction", 1), 0);
  const auto no = run_args({"advise", snap, "--fit", "240MiB", "--torch-python", "python3"});
  EXPECT_EQ(no.code, gb::cli::exit_usage);
  EXPECT_EQ(no.out, "");
  EXPECT_NE(no.err.find("--torch-python: python3 does not accept"), std::string::npos) << no.err;
  EXPECT_NE(no.err.find("Unrecognized key per_process_memory_fraction"), std::string::npos)
      << no.err;
  unsetenv("REFUSE");
  unsetenv("SEEN");
  unsetenv("PYTHONPATH");
}

TEST(HostileSnapshot, FitLimitsAreEchoedInTheUnitGiven) {
  const std::string snap = kData + "/snapshot_small.pickle";
  const auto r = run_args({"advise", snap, "--fit", "8.8GiB", "--fit", "9.5GB", "--fit", "9000MiB",
                           "--fit", "9448928051"});
  ASSERT_EQ(r.code, gb::cli::exit_ok) << r.err;
  for (const char* label : {"| 8.8 GiB", "| 9.5 GB", "| 9000 MiB"})
    EXPECT_NE(r.out.find(label), std::string::npos) << label << "\n" << r.out;
  // 9448928051 bytes is 8.8GiB rounded: the same limit, replayed once, labelled as first given.
  const auto j =
      run_args({"advise", snap, "--fit", "8.8GiB", "--fit", "9448928051", "--json", "-"});
  ASSERT_EQ(j.code, gb::cli::exit_ok) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["fit_limits_bytes"], nlohmann::json::array({9448928051ull}));
  EXPECT_EQ(doc["fit_limits_given"], nlohmann::json::array({"8.8 GiB"}));
}

// `gpu-basics replay`: its options, its output and its errors, as a user meets them.
#include <algorithm>
#include <csignal>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

#include "cli.hpp"
#include "exit_codes.hpp"
#include "replay.hpp"
#include "run.hpp"
#include "snapshot_test_util.hpp"

using namespace snapshot_test;

int run_cli(gb::cli::options o, std::string& out, std::string& err) {
  std::ostringstream so, se;
  const int rc = gb::cli::run(o, so, se);
  out = so.str();
  err = se.str();
  return rc;
}
gb::cli::options replay_options(const std::string& input) {
  gb::cli::options o;
  o.command = "replay";
  o.input_path = input;
  return o;
}

TEST(ReplayCommand, ABadFileIsOneLineAndExitTwoWritingNothing) {
  const auto dir = scratch("cli_bad");
  write_bytes(dir / "x.pickle", "not a pickle at all");
  auto o = replay_options((dir / "x.pickle").string());
  o.json_path = (dir / "out.json").string();
  std::string out, err;
  EXPECT_EQ(run_cli(o, out, err), gb::cli::exit_usage);
  EXPECT_EQ(err, "gpu-basics: " + (dir / "x.pickle").string() +
                     ": not a pickle (a PyTorch memory snapshot is one, from "
                     "torch.cuda.memory._dump_snapshot)\n");
  EXPECT_EQ(out, "");
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json"));
  auto p = replay_options(kData + "/snapshot_small.pickle");
  p.policies = {"max_split_size_mb:x"};
  EXPECT_EQ(run_cli(p, out, err), gb::cli::exit_usage);
  EXPECT_EQ(err.rfind("gpu-basics: --policy: allocator conf: max_split_size_mb: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
}

TEST(ReplayCommand, PrintsEveryPolicyAndPyTorchsOwnFigures) {
  const auto dir = scratch("cli_good");
  auto o = replay_options(kData + "/snapshot_small.pickle");
  o.policies = {"max_split_size_mb:32,expandable_segments:True"};
  o.json_path = (dir / "replay.json").string();
  std::string out, err;
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(err, "");
  EXPECT_NE(out.find("| (defaults)"), std::string::npos) << out;
  EXPECT_NE(out.find("| PyTorch (recorded)"), std::string::npos) << out;
  EXPECT_NE(out.find("max_split_size_mb:32,expandable_segments:True"), std::string::npos);
  EXPECT_NE(out.find("Lowest peak reserved: "), std::string::npos);
  const auto j = nlohmann::json::parse(read_bytes(dir / "replay.json"));
  ASSERT_EQ(j["policies"].size(), gb::replay_policies({}).size() + 1);
  EXPECT_EQ(j["policies"][0]["conf"], "");
  EXPECT_EQ(j["policies"][0]["peak_reserved_bytes"], 54 * MiB);  // worked out above
  EXPECT_EQ(j["recorded"]["peak_reserved_bytes"], 54 * MiB);
  EXPECT_EQ(j["replay_events"], 7);
  EXPECT_TRUE(j["device_memory_bytes"].is_null());
  std::uint64_t lowest = UINT64_MAX;
  for (const auto& p : j["policies"])
    if (!p["peak_reserved_bytes"].is_null())
      lowest = std::min(lowest, p["peak_reserved_bytes"].get<std::uint64_t>());
  bool best_is_lowest = false;
  for (const auto& p : j["policies"])
    if (p["conf"] == j["best_conf"]) best_is_lowest = p["peak_reserved_bytes"] == lowest;
  EXPECT_TRUE(best_is_lowest) << j.dump(2);
}

TEST(ReplayCommand, ParsesPoliciesAndMemorySnapshot) {
  std::ostringstream o, e;
  const auto r = gb::cli::parse({"gpu-basics", "replay", "s.pickle", "--policy", "a:1", "--policy",
                                 "b:2", "--json", "r.json"},
                                o, e);
  ASSERT_TRUE(r.opts) << e.str();
  EXPECT_EQ(r.opts->input_path, "s.pickle");
  EXPECT_EQ(r.opts->policies, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(r.opts->json_path, "r.json");
  const auto m = gb::cli::parse({"gpu-basics", "memory", "--snapshot", "m.pickle"}, o, e);
  ASSERT_TRUE(m.opts);
  EXPECT_EQ(m.opts->snapshot_path, "m.pickle");
  EXPECT_FALSE(gb::cli::parse({"gpu-basics", "transfer", "--snapshot", "m.pickle"}, o, e).opts);
  EXPECT_FALSE(gb::cli::parse({"gpu-basics", "replay"}, o, e).opts);
}

TEST(ReplayCommand, ABlankOrRepeatedPolicyIsRefused) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{" "}, "gpu-basics: --policy: a blank policy \" \"; give a PYTORCH_CUDA_ALLOC_CONF string"},
      {{"\t"}, "gpu-basics: --policy: a blank policy \"\\t\""},
      {{"expandable_segments:True"},
       "gpu-basics: --policy: \"expandable_segments:True\" is the same policy as "
       "\"expandable_segments:True\", already in the sweep"},
      {{"max_split_size_mb:300", "max_split_size_mb:300"},
       "gpu-basics: --policy: \"max_split_size_mb:300\" is the same policy as "
       "\"max_split_size_mb:300\""},
      {{"expandable_segments:False"}, "is the same policy as the defaults"},
  };
  for (const auto& [policies, message] : cases) {
    auto o = replay_options(kData + "/snapshot_small.pickle");
    o.policies = policies;
    std::string out, err;
    EXPECT_EQ(run_cli(o, out, err), gb::cli::exit_usage) << message;
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(out, "");
  }
}

TEST(ReplayCommand, StringsFromTheFileAreEscapedInTheTableAndValidInTheJson) {
  const auto dir = scratch("cli_escapes");
  const auto path = (dir / "s.pickle").string();
  write_bytes(
      path, pk::dumps(snapshot_of_trace({trace_event("alloc", 16, 512)}, "\x1b[31mred\xff\xfe\r")));
  auto o = replay_options(path);
  std::string out, err;
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_NE(out.find("PyTorch (recorded) \\x1b[31mred\\xff\\xfe\\r"), std::string::npos) << out;
  o.json_path = "-";
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(err, "");
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["recorded"]["alloc_conf"], "\x1b[31mred\xef\xbf\xbd\xef\xbf\xbd\r");
}

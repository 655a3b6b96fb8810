// A good citizen on a shared GPU: the other processes among NVML's list, and what a large step
// of the unified lesson does beside them (run, shrink, skip), with the line it prints.
#include <algorithm>

#include <gtest/gtest.h>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/shared_gpu.hpp"
#include "gpu_basics/lessons/unified.hpp"

namespace gb = gpu_basics;

namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

gb::gpu_neighbours others(std::vector<unsigned> pids, std::uint64_t used = 0) {
  gb::gpu_neighbours n;
  n.known = true;
  n.pids = std::move(pids);
  n.used_bytes = used;
  return n;
}

}  // namespace

TEST(SharedGpu, ThisProcessIsNotAnOther) {
  const std::vector<gb::nvml_process> listed = {{4242, 20 * GiB}, {77, 1 * GiB}, {9, std::nullopt}};
  const auto n = gb::neighbours_of(listed, 77);
  EXPECT_TRUE(n.known);
  EXPECT_EQ(n.pids, (std::vector<unsigned>{4242, 9}));
  EXPECT_EQ(n.used_bytes, 20 * GiB);  // the one the driver cannot say counts nothing
  // Alone: only this process is listed.
  EXPECT_FALSE(gb::neighbours_of({{77, 1 * GiB}}, 77).any());
  EXPECT_FALSE(gb::neighbours_of({}, 77).any());
}

TEST(SharedGpu, InAnotherPidNamespaceOneEntryIsThisProcess) {
  // NVML's PIDs are the host's: none is this process's own, and one of them is this process.
  const auto alone = gb::neighbours_of({{31337, 1 * GiB}}, 12);
  EXPECT_FALSE(alone.any());
  const auto two = gb::neighbours_of({{31337, 1 * GiB}, {31338, 20 * GiB}}, 12);
  EXPECT_EQ(two.pids.size(), 1u);
}

TEST(SharedGpu, AloneAStepRunsAsAsked) {
  const gb::config::shared_gpu_section c;
  const auto m = gb::plan_memory_step("the ballast", 70 * GiB, 72 * GiB, {}, c, false);
  EXPECT_EQ(m.action, "ran");
  EXPECT_EQ(m.used_bytes, 70 * GiB);
  EXPECT_EQ(m.line, "");
  // NVML could not list the processes: taken as none.
  gb::gpu_neighbours unknown;
  unknown.why = "no permission";
  EXPECT_EQ(gb::plan_memory_step("x", 70 * GiB, 72 * GiB, unknown, c, false).action, "ran");
}

TEST(SharedGpu, BesideOthersALargeStepShrinksOrIsSkipped) {
  const gb::config::shared_gpu_section c;  // free_share 0.25
  const auto n = others({4242}, 20 * GiB);
  // Within the share: runs.
  EXPECT_EQ(gb::plan_memory_step("small", 10 * GiB, 58 * GiB, n, c, false).action, "ran");
  // Shrinkable: a quarter of 58 GiB + 3 MiB, whole MiB.
  const auto idle = gb::plan_memory_step("the idle allocation", 46 * GiB, 58 * GiB + 3 * MiB, n, c,
                                         true, 64 * MiB);
  EXPECT_EQ(idle.action, "shrank");
  EXPECT_EQ(idle.used_bytes, (58 * GiB + 3 * MiB) / 4 / MiB * MiB);
  EXPECT_NE(idle.line.find("PID 4242"), std::string::npos) << idle.line;
  EXPECT_NE(idle.line.find("shared_gpu.force: true"), std::string::npos) << idle.line;
  EXPECT_NE(idle.line.find("20 GiB held"), std::string::npos) << idle.line;
  // Not shrinkable: skipped, nothing taken.
  const auto ballast =
      gb::plan_memory_step("the oversubscription ballast", 56 * GiB, 58 * GiB, n, c, false);
  EXPECT_EQ(ballast.action, "skipped");
  EXPECT_EQ(ballast.used_bytes, 0u);
  EXPECT_EQ(ballast.line.rfind("the oversubscription ballast skipped", 0), 0u) << ballast.line;
  // Shrinkable, but the share is below the least it can use: skipped.
  EXPECT_EQ(gb::plan_memory_step("x", 46 * GiB, 200 * MiB, n, c, true, 64 * MiB).action, "skipped");
}

TEST(SharedGpu, TheKeysDecide) {
  gb::config::shared_gpu_section c;
  const auto n = others({1, 2, 3, 4, 5});
  c.force = true;
  EXPECT_EQ(gb::plan_memory_step("x", 56 * GiB, 58 * GiB, n, c, false).action, "ran");
  c.force = false;
  c.free_share = 1.0;
  EXPECT_EQ(gb::plan_memory_step("x", 56 * GiB, 58 * GiB, n, c, false).action, "ran");
  c.free_share = 0.5;
  const auto m = gb::plan_memory_step("x", 56 * GiB, 58 * GiB, n, c, true);
  EXPECT_EQ(m.used_bytes, 29 * GiB);
  EXPECT_NE(m.line.find("5 other processes use this GPU (PID 1, 2, 3, 4, ...)"), std::string::npos)
      << m.line;
  // The keys themselves: a share must be in (0, 1].
  EXPECT_THROW(gb::validate(gb::parse_config("shared_gpu:\n  free_share: 0\n", "t.yaml")),
               gb::config_error);
  EXPECT_THROW(gb::validate(gb::parse_config("shared_gpu:\n  free_share: 1.5\n", "t.yaml")),
               gb::config_error);
  const auto cfg = gb::parse_config("shared_gpu:\n  free_share: 0.5\n  force: true\n", "t");
  EXPECT_EQ(cfg.shared_gpu.free_share, 0.5);
  EXPECT_TRUE(cfg.shared_gpu.force);
}

TEST(SharedGpu, StepsGoToTheResultAndItsNotes) {
  gb::lessons::unified_result r;
  r.beliefs.emplace();
  r.memory_steps.push_back(gb::plan_memory_step("the idle allocation", 46 * GiB, 58 * GiB,
                                                others({4242}), {}, true, 64 * MiB));
  const nlohmann::json j = r;
  EXPECT_EQ(j["memory_steps"][0]["action"], "shrank");
  EXPECT_EQ(j.get<gb::lessons::unified_result>(), r);
  // A result written before the key existed still loads, with no steps.
  nlohmann::json old = j;
  old.erase("memory_steps");
  EXPECT_TRUE(old.get<gb::lessons::unified_result>().memory_steps.empty());
  const auto notes = gb::lessons::explain_unified(r, {});
  const auto it = std::find_if(notes.begin(), notes.end(), [](const gb::lessons::note& n) {
    return n.text.find("the idle allocation: ") != std::string::npos;
  });
  ASSERT_NE(it, notes.end());
  EXPECT_EQ(it->table_id, "beliefs");
}

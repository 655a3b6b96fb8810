// Every lesson measured on the GPU through the registry, as the CLI runs it: the result survives
// JSON text unchanged and renders the same tables from the text as from the live value, and a
// whole run saved as a record loads and renders again. A small configuration keeps it short.
#include <gtest/gtest.h>

#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

config small_config() {
  return load_config(
      "",
      {"benchmark.iterations=5", "benchmark.warmup_iterations=1",
       "transfer.tensor_shapes=[[1024, 1024], [2048, 2048]]", "transfer.large_copy_bytes=64 MiB",
       "transfer.double_buffer.batches=8", "transfer.double_buffer.batch_bytes=16 MiB",
       "transfer.multi_gpu.peer_bytes=16 MiB", "transfer.multi_gpu.nccl_max_bytes=16 MiB",
       "profiler.matmul.shapes=[[2048, 2048, 2048]]", "output.directory=gpu_test_results",
       "unified.repetitions=2", "unified.managed.bytes=32 MiB",
       "unified.oversubscription.free_bytes=512 MiB", "unified.oversubscription.ratios=[0.5, 1.1]",
       "unified.oversubscription.chunk_bytes=16 MiB", "unified.zero_copy.bytes=16 MiB",
       "unified.beliefs.copy_bytes=16 MiB", "unified.beliefs.idle_allocation_bytes=1 GiB",
       "unified.beliefs.d2d_max_bytes=256 MiB"});
}

std::string text_of(const presentation::report& r) {
  std::string s;
  for (const auto& t : r.tables) s += presentation::render_text(t) + "\n";
  return s;
}

}  // namespace

TEST(Lessons, EachMeasuresSerializesAndRendersTheSameFromText) {
  SKIP_WITHOUT_GPU();
  context ctx = open_context(small_config());
  ctx.self_exe = GPU_BASICS_CLI;  // the unified lesson's ledger runs it as a child
  const device_facts facts = device_facts::of(ctx.device(), ctx.nvml_status);
  run_record rec;
  rec.command = "all";
  std::vector<presentation::report> live;
  for (const auto& l : measuring_registry()) {
    SCOPED_TRACE(std::string(l.name));
    const nlohmann::json result = l.measure(ctx);
    ASSERT_TRUE(result.is_object());
    const nlohmann::json back = nlohmann::json::parse(result.dump());
    EXPECT_EQ(back, result);  // numbers, strings and nulls survive the text
    const auto rendered = l.render(result, facts);
    EXPECT_FALSE(rendered.tables.empty());
    for (const auto& t : rendered.tables) EXPECT_FALSE(t.rows.empty()) << t.id;
    EXPECT_EQ(text_of(l.render(back, facts)), text_of(rendered));
    live.push_back(rendered);
    rec.results.emplace_back(std::string(l.name), result);
  }
  rec.environment = environment_json(ctx.cfg, ctx.devices, ctx.nvml_status);
  const run_record loaded = parse_record(nlohmann::json::parse(to_json(rec, live).dump()), "run");
  const auto again = render(loaded);
  ASSERT_EQ(again.size(), live.size());
  for (std::size_t i = 0; i < live.size(); ++i) EXPECT_EQ(text_of(again[i]), text_of(live[i]));
}

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST(Lessons, ShowPrintsWhatTheLiveRunPrinted) {
  SKIP_WITHOUT_GPU();
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_show";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cli = GPU_BASICS_CLI;
  const std::string run = cli + " memory --set benchmark.iterations=3 --json " +
                          (dir / "m.json").string() + " > " + (dir / "live.txt").string();
  ASSERT_EQ(std::system(run.c_str()), 0) << run;
  const std::string show =
      cli + " show " + (dir / "m.json").string() + " > " + (dir / "show.txt").string();
  ASSERT_EQ(std::system(show.c_str()), 0) << show;
  const std::string live = slurp(dir / "live.txt");
  EXPECT_NE(live.find("What one allocation + free costs"), std::string::npos) << live;
  EXPECT_EQ(slurp(dir / "show.txt"), live);
  std::filesystem::remove_all(dir);
}

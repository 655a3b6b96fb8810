// Tests of the profile lesson: JSON round trip, notes computed from the result and the datasheet,
// the tables, the sample series, and the upgrade of schema-1 files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "lesson_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

summary spread(double median, std::size_t count) {
  return gpu_basics::testing::spread_around(median, count);
}

matmul_run run(const char* precision, double median, std::optional<double> peak, double start) {
  matmul_run x;
  x.precision = precision;
  x.m = 8192;
  x.n = 4096;
  x.k = 2048;
  x.candidates = 7;
  x.chosen = 3;
  x.candidate_median_s = {2.1e-3, 1.9e-3, 2.4e-3, 1.7e-3};
  x.seconds = {1.71e-3, 1.69e-3, 1.73e-3};
  x.flops_per_s = spread(median, 3);
  x.peak_flops_per_s = peak;
  x.check_error = 3.25e-4;
  x.start_s = start;
  x.end_s = start + 0.37;
  return x;
}

profile_result sample_result() {
  profile_result r;
  r.timing.bytes = 64ull << 20;
  r.timing.lcg_iterations = 1000;
  r.timing.warmup = 3;
  r.timing.iterations = 17;
  r.timing.host_no_sync_s = spread(4.2e-6, 17);
  r.timing.host_sync_s = spread(2.31e-4, 17);
  r.timing.events_s = spread(2.17e-4, 17);
  r.key_averages.bytes = 64ull << 20;
  r.key_averages.lcg_iterations = 200;
  r.key_averages.steps = 17;
  r.key_averages.regions = {{"D2H copy 64 MiB (pinned)", 17, 0.0213, 1.23e-3, 1.31e-3, 1.7e-4},
                            {"H2D copy 64 MiB (pinned)", 17, 0.0201, 1.16e-3, 1.22e-3, 1.5e-4},
                            {"integer kernel 64 MiB", 17, 0.0031, 1.7e-4, 1.9e-4, 6.8e-5}};
  r.matmul.max_candidates = 6;
  r.matmul.check_size = 192;
  r.matmul.workspace_bytes = 32ull << 20;
  r.matmul.warmup = 2;
  r.matmul.iterations = 11;
  r.matmul.runs = {run("bf16", 781.3e12, 989e12, 0.012), run("fp16", 769.9e12, 989e12, 0.41),
                   run("tf32", 348.7e12, 494e12, 0.83), run("fp32", 48.7e12, 67e12, 1.27)};
  nvml_sampling s;
  s.interval_ms = 10;
  s.slow_interval_ms = 5000;
  s.samples = 123;
  s.dropped = 2;
  s.metrics = {{"gpu_util_percent", "ok", 123, 79.6, 2.0, 100.0, 99.0, 100.0},
               {"memory_used_bytes", "ok", 123, 2.3 * (1ull << 30), 1.6 * (1ull << 30),
                2.4 * (1ull << 30), 2.4 * (1ull << 30), 2.4 * (1ull << 30)},
               {"power_w", "ok", 121, 425.7, 119.4, 699.0, 430.9, 699.0},
               {"temperature_c", "not_supported", 0, std::nullopt, std::nullopt, std::nullopt,
                std::nullopt, std::nullopt}};
  s.energy_status = "ok";
  s.energy_j = 815.4;
  s.energy_s = 1.22;
  s.cost = sampler_cost{0.0183, 1.22, 0.0092, 2, 125, std::nullopt};
  s.samples_csv_path = "results/profile_samples.csv";
  s.series = {{"power_w", {0.0, 0.01, 0.02}, {119.4, 430.9, 699.0}, 3},
              {"sm_clock_mhz", {0.0, 0.02}, {1980.0, 1485.0}, 2400}};
  r.nvml = s;
  trace_summary t;
  t.path = "results/profile.json.gz";
  t.source = "cupti";
  t.device = 1;
  t.kernels = 380;
  t.memcpys = 50;
  t.memsets = 141;
  t.api_calls = 3255;
  t.syncs = 233;
  t.ranges = 22;
  t.flows = 362;
  t.nvml_counter_events = 857;
  t.events = 5673;
  t.write_s = 0.0104;
  t.schedule_wait = 1;
  t.schedule_warmup = 1;
  r.trace = t;
  return r;
}

device_facts h200() {
  device_facts f;
  f.device.name = "NVIDIA H200";
  f.datasheet = find_datasheet("NVIDIA H200");
  return f;
}

std::vector<std::string> notes_for(const std::vector<note>& notes, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& n : notes)
    if (n.table_id == id) out.push_back(n.text);
  return out;
}

bool any_contains(const std::vector<std::string>& texts, const std::string& what) {
  return std::any_of(texts.begin(), texts.end(),
                     [&](const std::string& t) { return t.find(what) != std::string::npos; });
}

const presentation::table& table_named(const std::vector<presentation::table>& ts,
                                       const std::string& id) {
  for (const auto& t : ts)
    if (t.id == id) return t;
  throw std::out_of_range("no table " + id);
}

std::vector<std::string> keys_of(const presentation::table& t) {
  std::vector<std::string> k;
  for (const auto& c : t.columns) k.push_back(c.key);
  return k;
}

double num(const presentation::value& v) {
  return std::get<double>(v);
}

}  // namespace

TEST(LessonProfile, ResultRoundTripsThroughJsonAndText) {
  const profile_result r = sample_result();
  const nlohmann::json j = r;
  EXPECT_EQ(j.get<profile_result>(), r);
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<profile_result>(), r);
  EXPECT_TRUE(j.at("nvml").at("cost").is_object());
  // Absent parts are JSON null and come back absent.
  profile_result bare = r;
  bare.nvml.reset();
  bare.trace.reset();
  bare.nvml_status = "NVML unavailable: libnvidia-ml.so.1 not found";
  bare.matmul.runs[2].start_s.reset();
  const nlohmann::json b = bare;
  EXPECT_TRUE(b.at("nvml").is_null());
  EXPECT_EQ(nlohmann::json::parse(b.dump()).get<profile_result>(), bare);
  EXPECT_NE(bare, r);
}

TEST(LessonProfile, MatmulNotesComputePercentOfPeakAndTf32RateAndCiteTheDatasheet) {
  const profile_result r = sample_result();
  const auto facts = h200();
  ASSERT_TRUE(facts.datasheet);
  const auto notes = notes_for(explain_profile(r, facts), "matmul");
  ASSERT_EQ(notes.size(), 3u);
  // fp16/bf16 against their peaks: the lowest and highest share.
  const double lo = 100.0 * 769.9e12 / 989e12, hi = 100.0 * 781.3e12 / 989e12;
  EXPECT_TRUE(any_contains(
      notes, fmt::format("Real GEMMs reach {:.1f}-{:.1f}% of the tensor-core peak here", lo, hi)))
      << notes[0];
  EXPECT_TRUE(any_contains(notes, std::string(facts.datasheet->source))) << notes[0];
  EXPECT_TRUE(any_contains(
      notes, fmt::format("{:.0f} TFLOP/s fp16/bf16", facts.datasheet->bf16_flops / 1e12)));
  EXPECT_FALSE(any_contains(notes, "75-80%"));
  // tf32 over fp32: the datasheet's ratio and the one measured at the same shape.
  const double sheet = facts.datasheet->tf32_flops / facts.datasheet->fp32_flops,
               meas = 348.7e12 / 48.7e12;
  EXPECT_TRUE(any_contains(
      notes,
      fmt::format("{:.1f}x fp32's rate by the datasheet ({:.1f}x measured here)", sheet, meas)))
      << notes[2];
  EXPECT_TRUE(any_contains(notes, "proposes up to 6 algorithms"));
}

TEST(LessonProfile, MatmulNotesWithoutDatasheetOrPairsDropTheFigures) {
  profile_result r = sample_result();
  r.matmul.max_candidates.reset();
  r.matmul.runs = {run("fp32", 48.7e12, std::nullopt, 0.0)};
  const auto notes = notes_for(explain_profile(r, device_facts{}), "matmul");
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[0], "- peak unknown: this GPU is not in the datasheet table (hardware.cpp).");
  EXPECT_TRUE(any_contains(notes, "proposes several algorithms"));
  EXPECT_TRUE(any_contains(notes, "a multiple of fp32's rate"));
  // A known GPU but no fp16/bf16 run: no share is claimed.
  const auto known = notes_for(explain_profile(r, h200()), "matmul");
  EXPECT_TRUE(any_contains(known, "Real GEMMs stay below the tensor-core peak"));
}

TEST(LessonProfile, NvmlNotesComputeEnergyAndSamplerCostFromTheResult) {
  const profile_result r = sample_result();
  const auto notes = notes_for(explain_profile(r, h200()), "nvml");
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_TRUE(
      any_contains(notes, fmt::format("Energy counter: {:.0f} J over {:.2f} s, a mean of {:.0f} W",
                                      815.4, 1.22, 815.4 / 1.22)));
  const sampler_cost& c = *r.nvml->cost;
  const double fast_each = (c.cpu_s - c.slow_cpu_s) / 123.0, slow_each = c.slow_cpu_s / 2.0;
  const double steady = 100.0 * (fast_each / 0.010 + slow_each / 5.0);
  EXPECT_TRUE(any_contains(notes, fmt::format("used {:.2f}% of one CPU core over {:.2f} s",
                                              100.0 * c.cpu_s / c.wall_s, c.wall_s)));
  EXPECT_TRUE(any_contains(notes, fmt::format("({:.1f} ms of CPU each", 1e3 * slow_each)));
  EXPECT_TRUE(any_contains(
      notes, fmt::format("{:.2f}% in 123 plain samples ({:.0f} us each",
                         100.0 * (c.cpu_s - c.slow_cpu_s) / c.wall_s, 1e6 * fast_each)));
  EXPECT_TRUE(
      any_contains(notes, fmt::format("its steady cost is about {:.2f}% of a core", steady)));
  EXPECT_TRUE(any_contains(notes, "- All samples: results/profile_samples.csv"));

  profile_result other = r;
  other.nvml->energy_status = "not_supported";
  other.nvml->cost.reset();
  const auto n2 = notes_for(explain_profile(other, h200()), "nvml");
  EXPECT_TRUE(any_contains(n2, "- Energy counter: not_supported."));
  EXPECT_FALSE(any_contains(n2, "sampler thread"));
  EXPECT_FALSE(any_contains(notes, "are read every"));  // no medium interval in the result

  profile_result tiered = r;
  tiered.nvml->medium_interval_ms = 100;
  const auto n3 = notes_for(explain_profile(tiered, h200()), "nvml");
  ASSERT_EQ(n3.size(), notes.size() + 1);
  EXPECT_TRUE(any_contains(
      n3, fmt::format("clock-event reasons are read every {} ms, the other metrics every {} ms",
                      100, r.nvml->interval_ms)));
  EXPECT_TRUE(any_contains(n3, fmt::format("reading those {}x as often", 100 / 10)));
}

TEST(LessonProfile, PresentKeepsTheTablesOfTheOldOutput) {
  const profile_result r = sample_result();
  const auto ts = present_profile(r);
  std::vector<std::string> ids;
  for (const auto& t : ts) ids.push_back(t.id);
  EXPECT_EQ(
      ids, (std::vector<std::string>{"timing_methods", "key_averages", "matmul", "nvml", "trace"}));

  const auto& tm = table_named(ts, "timing_methods");
  EXPECT_EQ(keys_of(tm), (std::vector<std::string>{"method", "median_s", "measures"}));
  EXPECT_EQ(tm.title, "Timing one kernel three ways (an integer kernel over 64 MiB, median)");
  ASSERT_EQ(tm.rows.size(), 3u);
  EXPECT_EQ(num(tm.rows[2][1]), r.timing.events_s.median);

  const auto& ka = table_named(ts, "key_averages");
  EXPECT_EQ(keys_of(ka), (std::vector<std::string>{"name", "calls", "gpu_total_s", "gpu_mean_s",
                                                   "gpu_min_s", "gpu_max_s", "host_mean_s"}));
  ASSERT_EQ(ka.rows.size(), 3u);
  EXPECT_EQ(std::get<std::string>(ka.rows[1][0]), "H2D copy 64 MiB (pinned)");
  EXPECT_DOUBLE_EQ(num(ka.rows[1][3]), 0.0201 / 17);
  EXPECT_DOUBLE_EQ(num(ka.rows[1][6]), 1.5e-4 / 17);

  const auto& mm = table_named(ts, "matmul");
  EXPECT_EQ(keys_of(mm),
            (std::vector<std::string>{"precision", "shape", "candidates", "chosen",
                                      "median_flops_per_s", "min_flops_per_s", "max_flops_per_s",
                                      "peak_flops_per_s", "peak_percent", "check_error"}));
  ASSERT_EQ(mm.rows.size(), 4u);
  EXPECT_EQ(std::get<std::string>(mm.rows[0][1]), "8192 x 4096 x 2048");
  EXPECT_EQ(std::get<std::int64_t>(mm.rows[0][2]), 7);
  EXPECT_DOUBLE_EQ(num(mm.rows[0][8]), 100.0 * 781.3e12 / 989e12);
  EXPECT_DOUBLE_EQ(num(mm.rows[3][4]), 48.7e12);

  const auto& nv = table_named(ts, "nvml");
  EXPECT_EQ(nv.title, "NVML during the matmuls (123 samples every 10 ms)");
  EXPECT_EQ(keys_of(nv),
            (std::vector<std::string>{"metric", "status", "mean", "min", "max", "p50", "p95"}));
  ASSERT_EQ(nv.rows.size(), 4u);
  EXPECT_EQ(std::get<std::string>(nv.rows[1][0]), "memory_used_bytes (GiB)");
  EXPECT_NEAR(num(nv.rows[1][2]), 2.3, 1e-12);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(nv.rows[3][2]));
  EXPECT_EQ(num(nv.rows[2][4]), 699.0);

  const auto& tr = table_named(ts, "trace");
  EXPECT_EQ(tr.rows.size(), 11u);
}

TEST(LessonProfile, WithoutNvmlTheTableSaysWhyAndUnknownPeaksAreEmpty) {
  profile_result r = sample_result();
  r.nvml.reset();
  r.trace.reset();
  r.nvml_status = "NVML unavailable: no driver";
  r.matmul.runs[0].peak_flops_per_s.reset();
  const auto ts = present_profile(r);
  ASSERT_EQ(ts.size(), 4u);
  const auto& nv = table_named(ts, "nvml");
  EXPECT_EQ(nv.title, "NVML");
  EXPECT_EQ(keys_of(nv), std::vector<std::string>{"status"});
  EXPECT_EQ(std::get<std::string>(nv.rows.at(0).at(0)), "NVML unavailable: no driver");
  const auto& mm = table_named(ts, "matmul");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(mm.rows[0][7]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(mm.rows[0][8]));
  const auto notes = notes_for(explain_profile(r, h200()), "nvml");
  EXPECT_EQ(notes, std::vector<std::string>{"- Without NVML there is no utilization, power or "
                                            "clock data; the rest of the lesson ran."});
}

TEST(LessonProfile, RegistryEntryRendersTablesWithTheirNotes) {
  const lesson l = profile_lesson();
  EXPECT_EQ(l.name, "profile");
  EXPECT_TRUE(l.traces);
  const auto rep = l.render(nlohmann::json(sample_result()), h200());
  ASSERT_EQ(rep.tables.size(), 5u);
  EXPECT_EQ(rep.lesson, "profile");
  EXPECT_EQ(rep.tables[2].notes.size(), 3u);
  EXPECT_EQ(rep.tables[3].notes.size(), 4u);
  EXPECT_THROW((void)l.render(nlohmann::json{{"timing", 3}}, h200()), format_error);
}

TEST(LessonProfile, SeriesAreRelativeToTheOriginAndDecimated) {
  std::vector<gpu_sample> samples;
  for (int i = 0; i < 2500; ++i) {
    gpu_sample s;
    s.time_s = 100.0 + 0.01 * i;
    s[gpu_metric::power_w] = {metric_status::ok, 100.0 + i};
    if (i % 2 == 0) s[gpu_metric::gpu_util_percent] = {metric_status::ok, 50.0};
    s[gpu_metric::temperature_c] = {metric_status::not_supported, 0.0};
    samples.push_back(s);
  }
  const auto series = series_of(samples, 99.5, 1000);
  ASSERT_EQ(series.size(), 2u);  // no temperature, no SM clock
  EXPECT_EQ(series[0].metric, "gpu_util_percent");
  EXPECT_EQ(series[0].source_points, 1250u);
  EXPECT_EQ(series[0].values.size(), 1000u);
  const auto& p = series[1];
  EXPECT_EQ(p.metric, "power_w");
  EXPECT_EQ(p.source_points, 2500u);
  ASSERT_EQ(p.time_s.size(), 1000u);
  EXPECT_DOUBLE_EQ(p.time_s.front(), 0.5);
  EXPECT_DOUBLE_EQ(p.time_s.back(), 0.5 + 0.01 * 2499);
  EXPECT_DOUBLE_EQ(p.values.back(), 2599.0);
  EXPECT_TRUE(std::is_sorted(p.time_s.begin(), p.time_s.end()));
  EXPECT_TRUE(std::adjacent_find(p.time_s.begin(), p.time_s.end()) == p.time_s.end());
  // Short series stay whole.
  const sample_series small{"power_w", {0, 1, 2}, {5, 6, 7}, 0};
  const auto same = decimate(small, 1000);
  EXPECT_EQ(same.values, small.values);
  EXPECT_EQ(same.source_points, 3u);
  EXPECT_THROW((void)decimate(sample_series{"x", {0, 1}, {1}, 0}), format_error);
}

// ---- schema 1 ---------------------------------------------------------------------------------

namespace {

using presentation::table;
using presentation::value;

/// The tables and extra keys of a schema-1 profile file, written the way cmd_profile.cpp did.
nlohmann::json v1_block(bool with_nvml) {
  nlohmann::json tables = nlohmann::json::object();
  table tm;
  tm.id = "timing_methods";
  tm.title = "Timing one kernel three ways (an integer kernel over 64 MiB, median)";
  tm.columns = {{"method", "method"},
                {"median_s", "measured (us)", 1e6, 1},
                {"measures", "what it measures"}};
  tm.add_row({std::string("host clock around the launch"), 4.5e-6, std::string("only the launch")});
  tm.add_row(
      {std::string("host clock + cudaStreamSynchronize"), 2.4e-4, std::string("launch + kernel")});
  tm.add_row({std::string("CUDA events around the kernel"), 2.2e-4, std::string("the kernel")});
  tables["timing_methods"] = presentation::to_json(tm);

  table ka;
  ka.id = "key_averages";
  ka.title = "Key averages (GPU time from CUDA events, host time from the host clock)";
  ka.columns = {{"name", "region"},
                {"calls", "calls"},
                {"gpu_total_s", "GPU total (ms)", 1e3, 3},
                {"gpu_mean_s", "GPU mean (us)", 1e6, 1},
                {"gpu_min_s", "GPU min (us)", 1e6, 1},
                {"gpu_max_s", "GPU max (us)", 1e6, 1},
                {"host_mean_s", "host mean (us)", 1e6, 1}};
  ka.add_row({std::string("H2D copy 64 MiB (pinned)"), std::int64_t{20}, 0.024, 0.0012, 0.00118,
              0.00125, 9e-6});
  tables["key_averages"] = presentation::to_json(ka);

  table mm;
  mm.id = "matmul";
  mm.title = "cuBLASLt matmul (fastest of the heuristic's candidates, random normal inputs)";
  mm.columns = {{"precision", "precision"},
                {"shape", "m x n x k"},
                {"candidates", "candidates"},
                {"chosen", "chosen"},
                {"median_flops_per_s", "TFLOP/s", 1e-12, 1},
                {"min_flops_per_s", "min", 1e-12, 1},
                {"max_flops_per_s", "max", 1e-12, 1},
                {"peak_flops_per_s", "peak", 1e-12, 0},
                {"peak_percent", "% of peak", 1.0, 1},
                {"check_error", "check rel. error", 1.0, 6}};
  mm.add_row({std::string("bf16"), std::string("8192 x 8192 x 8192"), std::int64_t{8},
              std::int64_t{6}, 774.1e12, 769.9e12, 810.3e12, 989e12, 78.3, 0.001903});
  mm.add_row({std::string("fp32"), std::string("8192 x 8192 x 8192"), std::int64_t{4},
              std::int64_t{1}, 48.7e12, 44.9e12, 50.5e12, value(std::monostate{}),
              value(std::monostate{}), 0.000001});
  mm.notes = {"- Peaks are the X figures (dense): ...",
              "- The heuristic proposes up to 8 algorithms (tile sizes, split-K, swizzles); each "
              "is timed ..."};
  tables["matmul"] = presentation::to_json(mm);

  table nv;
  nv.id = "nvml";
  if (with_nvml) {
    nv.title = "NVML during the matmuls (123 samples every 10 ms)";
    nv.columns = {{"metric", "metric"},   {"status", "status"},   {"mean", "mean", 1.0, 1},
                  {"min", "min", 1.0, 1}, {"max", "max", 1.0, 1}, {"p50", "p50", 1.0, 1},
                  {"p95", "p95", 1.0, 1}};
    nv.add_row({std::string("gpu_util_percent"), std::string("ok"), 79.6, 2.0, 100.0, 99.0, 100.0});
    nv.add_row(
        {std::string("memory_used_bytes (GiB)"), std::string("ok"), 2.25, 1.5, 2.5, 2.25, 2.5});
    nv.add_row({std::string("temperature_c"), std::string("no_permission"), value(std::monostate{}),
                value(std::monostate{}), value(std::monostate{}), value(std::monostate{}),
                value(std::monostate{})});
    nv.notes = {
        "- Utilization is the share of time a kernel was running over NVML's last sample period, "
        "not how busy "
        "the SMs were: a GEMM and a one-thread kernel can both show 100%.",
        "- Energy counter: 815 J over 1.22 s, a mean of 668 W (the power column is NVML's recent "
        "average at each "
        "sample; the counter integrates all of it).",
        "- The sampler thread used 1.50% of one CPU core over 1.22 s: 0.75% in 2 reads that "
        "include the energy "
        "counter (4.6 ms of CPU each: NVML reads it from the board, while the other metrics come "
        "from the "
        "driver's cache) and 0.75% in 121 plain samples (76 us each, waking up included). So at 10 "
        "ms with the "
        "counter read every 5 s, its steady cost is about 0.85% of a core; over a short run the "
        "counter's reads "
        "at both ends dominate.",
        "- All samples: results/profile_samples.csv"};
  } else {
    nv.title = "NVML";
    nv.columns = {{"status", "status"}};
    nv.add_row({std::string("NVML unavailable: libnvidia-ml.so.1 not found")});
  }
  tables["nvml"] = presentation::to_json(nv);

  table tr;
  tr.id = "trace";
  tr.title = "Trace written to results/p.json.gz";
  tr.columns = {{"what", "what"}, {"count", "count", 1.0, 0}};
  tr.add_row({std::string("kernels"), std::int64_t{380}});
  tr.add_row({std::string("trace events written"), std::int64_t{5673}});
  tr.notes = {
      "- Source: cupti. 5673 events written in 10.4 ms. Open the file in https://ui.perfetto.dev "
      "(or "
      "chrome://tracing): GPU 2 holds a track per stream and the counters; ...",
      "- Schedule: the first 1 step(s) untraced (start-up), the next 1 traced and discarded ..."};
  tables["trace"] = presentation::to_json(tr);

  nlohmann::json extra = nlohmann::json::object();
  summary f = spread(774.1e12, 20);
  nlohmann::json fj;
  to_json(fj, f);
  extra["matmul"] = nlohmann::json::array({{{"precision", "bf16"},
                                            {"m", 8192},
                                            {"n", 8192},
                                            {"k", 8192},
                                            {"candidate_median_s", {1.5e-3, 1.42e-3}},
                                            {"chosen", 6},
                                            {"seconds", {1.42e-3, 1.43e-3}},
                                            {"flops_per_s", fj},
                                            {"check_max_relative_error", 0.00190312}}});
  if (with_nvml) {
    nlohmann::json rows = nlohmann::json::array();
    for (int i = 0; i < 3; ++i)
      rows.push_back({{"time_s", 0.01 * i},
                      {"power_w", 120.0 + i},
                      {"gpu_util_percent", i == 1 ? nlohmann::json() : nlohmann::json(99.0)},
                      {"sm_clock_mhz", nullptr},
                      {"temperature_c", nullptr}});
    extra["nvml_samples"] = {{"metrics", {"power_w"}}, {"samples", rows}};
    extra["sampler_cpu_percent"] = 1.5037;
    extra["sampler_steady_cpu_percent"] = 0.85;
  }
  extra["trace"] = {
      {"path", "results/p.json.gz"}, {"source", "cupti"}, {"events", 5673}, {"write_s", 0.0104}};
  return {{"tables", tables}, {"extra", extra}};
}

}  // namespace

TEST(LessonProfile, FromV1RebuildsWhatSchemaOneKept) {
  const profile_result r = profile_from_v1(v1_block(true));
  EXPECT_EQ(r.timing.bytes, 64ull << 20);
  EXPECT_EQ(r.timing.host_sync_s.median, 2.4e-4);
  EXPECT_EQ(r.timing.events_s.median, 2.2e-4);
  EXPECT_EQ(r.timing.events_s.count, 0u);
  ASSERT_EQ(r.key_averages.regions.size(), 1u);
  EXPECT_EQ(r.key_averages.regions[0].calls, 20u);
  EXPECT_DOUBLE_EQ(r.key_averages.regions[0].host_total_s, 9e-6 * 20);

  EXPECT_EQ(r.matmul.max_candidates, 8);
  ASSERT_EQ(r.matmul.runs.size(), 2u);
  const auto& bf16 = r.matmul.runs[0];
  EXPECT_EQ(bf16.m, 8192u);
  EXPECT_EQ(bf16.flops_per_s, spread(774.1e12, 20));  // from extra.matmul, whole
  EXPECT_EQ(bf16.seconds, (std::vector<double>{1.42e-3, 1.43e-3}));
  EXPECT_EQ(bf16.check_error, 0.00190312);
  EXPECT_EQ(bf16.peak_flops_per_s, 989e12);
  EXPECT_FALSE(bf16.start_s);
  const auto& fp32 = r.matmul.runs[1];
  EXPECT_EQ(fp32.flops_per_s.median, 48.7e12);  // from the table alone
  EXPECT_EQ(fp32.flops_per_s.max, 50.5e12);
  EXPECT_FALSE(fp32.peak_flops_per_s);

  ASSERT_TRUE(r.nvml);
  const auto& s = *r.nvml;
  EXPECT_EQ(r.nvml_status, "ok");
  EXPECT_EQ(s.samples, 123u);
  EXPECT_EQ(s.interval_ms, 10);
  ASSERT_EQ(s.metrics.size(), 3u);
  EXPECT_EQ(s.metrics[1].metric, "memory_used_bytes");
  EXPECT_DOUBLE_EQ(*s.metrics[1].mean, 2.25 * (1ull << 30));
  EXPECT_EQ(s.metrics[2].status, "no_permission");
  EXPECT_FALSE(s.metrics[2].p95);
  EXPECT_EQ(s.energy_status, "ok");
  EXPECT_EQ(s.energy_j, 815.0);
  EXPECT_EQ(s.energy_s, 1.22);
  ASSERT_TRUE(s.cost);
  EXPECT_EQ(s.slow_interval_ms, 5000);
  EXPECT_EQ(s.cost->slow_samples, 2u);
  EXPECT_EQ(s.cost->samples_taken, 123u);
  EXPECT_DOUBLE_EQ(s.cost->cpu_s, 1.5037 / 100 * 1.22);
  EXPECT_EQ(s.samples_csv_path, "results/profile_samples.csv");
  ASSERT_EQ(s.series.size(), 2u);
  EXPECT_EQ(s.series[0].metric, "gpu_util_percent");
  EXPECT_EQ(s.series[0].time_s, (std::vector<double>{0.0, 0.02}));
  EXPECT_EQ(s.series[1].values, (std::vector<double>{120.0, 121.0, 122.0}));

  ASSERT_TRUE(r.trace);
  EXPECT_EQ(r.trace->kernels, 380);
  EXPECT_EQ(r.trace->events, 5673);
  EXPECT_EQ(r.trace->device, 2);
  EXPECT_EQ(r.trace->schedule_wait, 1);
  EXPECT_EQ(r.trace->source, "cupti");

  // The upgraded result renders: the sampler note's steady cost comes back near the old figure.
  const auto notes = notes_for(explain_profile(r, h200()), "nvml");
  EXPECT_TRUE(any_contains(notes, "its steady cost is about 0.8"))
      << (notes.size() > 2 ? notes[2] : "");
  EXPECT_EQ(present_profile(r).size(), 5u);
}

TEST(LessonProfile, FromV1WithoutNvmlKeepsWhy) {
  const profile_result r = profile_from_v1(v1_block(false));
  EXPECT_FALSE(r.nvml);
  EXPECT_EQ(r.nvml_status, "NVML unavailable: libnvidia-ml.so.1 not found");
  EXPECT_EQ(r.matmul.runs.size(), 2u);
}

TEST(LessonProfile, FromV1MalformedThrows) {
  gpu_basics::testing::expect_path_error([] { (void)profile_from_v1(nlohmann::json::object()); },
                                         "tables", "missing");
  EXPECT_THROW((void)profile_from_v1(nlohmann::json{{"tables", 3}}), format_error);
  auto bad_shape = v1_block(true);
  bad_shape["tables"]["matmul"]["rows"][0]["shape"] = "8192 x 8192";
  EXPECT_THROW((void)profile_from_v1(bad_shape), format_error);
  auto bad_rows = v1_block(true);
  bad_rows["tables"]["key_averages"]["rows"] = "none";
  EXPECT_THROW((void)profile_from_v1(bad_rows), format_error);
  auto bad_value = v1_block(true);
  bad_value["tables"]["timing_methods"]["rows"][0]["median_s"] = "fast";
  gpu_basics::testing::expect_path_error([&] { (void)profile_from_v1(bad_value); },
                                         "tables.timing_methods.rows[0].median_s",
                                         "expected a number, got \"fast\"");
  auto bad_method = v1_block(true);
  bad_method["tables"]["timing_methods"]["rows"][0]["method"] = "sundial";
  EXPECT_THROW((void)profile_from_v1(bad_method), format_error);
  auto huge = v1_block(true);
  huge["tables"]["nvml"]["title"] =
      "NVML during the matmuls (99999999999999999999999 samples every 10 ms)";
  EXPECT_THROW((void)profile_from_v1(huge), format_error);
}

TEST(LessonProfile, CostTableRanksCallsAndSplitsTheThreadsCost) {
  profile_result r = sample_result();
  nvml_sampling& s = *r.nvml;
  s.medium_interval_ms = 100;
  s.calls = {
      {"nvmlDeviceGetUtilizationRates", {"gpu_util_percent"}, "fast", 10, 120, 30, 7.5, 166.0},
      {"nvmlDeviceGetMemoryInfo", {"memory_used_bytes"}, "fast", 10, 120, 30, 21.0, 40.0},
      {"nvmlDeviceGetPowerUsage", {"power_w"}, "medium", 100, 12, 3, 4.0, std::nullopt},
      {"nvmlDeviceGetTotalEnergyConsumption",
       {"energy_j"},
       "slow",
       5000,
       2,
       1,
       3500.0,
       std::nullopt},
      {"nvmlDeviceGetPcieThroughput (tx)",
       {"pcie_tx_bytes_per_s"},
       "slow",
       5000,
       0,
       0,
       0,
       std::nullopt}};
  const auto ts = present_profile(r);
  const auto& t = table_named(ts, "nvml_cost");
  EXPECT_EQ(keys_of(t), (std::vector<std::string>{"call", "cadence", "interval_ms", "calls",
                                                  "cpu_us", "core_fraction", "changed_every_ms"}));
  // Four calls made (the PCIe one never was), by share: energy 3.5 ms / 5 s = 0.07%, memory
  // 21 us / 10 ms = 0.21%, utilization 0.075%, power 0.004%; then the sum, the rest, the thread.
  ASSERT_EQ(t.rows.size(), 7u);
  const std::vector<std::string> order = {
      "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
      "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"};
  for (std::size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(std::get<std::string>(t.rows[i][0]), order[i]);
  const double sum = 21e-6 / 0.01 + 7.5e-6 / 0.01 + 3.5e-3 / 5.0 + 4e-6 / 0.1;
  EXPECT_DOUBLE_EQ(num(t.rows[0][5]), 21e-6 / 0.01);
  EXPECT_NEAR(num(t.rows[4][5]), sum, 1e-15);
  const sampler_cost& c = *s.cost;
  const double steady = (c.cpu_s - c.slow_cpu_s) / 123.0 / 0.010 + c.slow_cpu_s / 2.0 / 5.0;
  EXPECT_NEAR(num(t.rows[6][5]), steady, 1e-12);
  EXPECT_NEAR(num(t.rows[5][5]), steady - sum, 1e-12);
  EXPECT_EQ(num(t.rows[1][6]), 166.0);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(t.rows[3][6]));

  const auto notes = notes_for(explain_profile(r, h200()), "nvml_cost");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(fmt::format("take {:.3f}% of a core in all; the costliest is "
                                      "nvmlDeviceGetMemoryInfo (21.0 us of CPU per call, every "
                                      "10 ms: {:.3f}%",
                                      100.0 * sum, 100.0 * 21e-6 / 0.01)),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("changed only every 40 ms (median), so about 3 reads in 4 repeated"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find(fmt::format("The rest of the thread's {:.3f}%, {:.3f}%, is waking up",
                                      100.0 * steady, 100.0 * (steady - sum))),
            std::string::npos)
      << notes[0];
  EXPECT_EQ(notes[0].find("only slept to the same deadlines"), std::string::npos) << notes[0];

  // With the floor measured beside the sampler: its own row before the thread's, and the note
  // parts the thread's cost into the OS's waking and the sampler's work above it.
  s.cost->wake_floor_fraction = 0.003;
  const auto tables_with_floor = present_profile(r);
  const auto& tf = table_named(tables_with_floor, "nvml_cost");
  ASSERT_EQ(tf.rows.size(), 8u);
  EXPECT_EQ(std::get<std::string>(tf.rows[6][0]),
            "of the rest: a thread that only wakes as often (the floor)");
  EXPECT_DOUBLE_EQ(num(tf.rows[6][5]), 0.003);
  EXPECT_NEAR(num(tf.rows[7][5]), steady, 1e-12);
  const auto floor_note = notes_for(explain_profile(r, h200()), "nvml_cost");
  ASSERT_EQ(floor_note.size(), 1u);
  EXPECT_NE(floor_note[0].find(fmt::format(
                "A thread beside it that only slept to the same deadlines took 0.300% of a core: "
                "that much is the OS waking a thread every 10 ms on this machine, the floor under "
                "any sampler at this interval; the sampler's own work above it is {:.3f}%.",
                100.0 * (steady - 0.003))),
            std::string::npos)
      << floor_note[0];
  EXPECT_EQ(floor_note[0].find("as much as the rest"), std::string::npos) << floor_note[0];
  // A floor at or above the rest: no split is claimed that the figures cannot carry.
  s.cost->wake_floor_fraction = steady - sum + 0.0001;
  const auto over = notes_for(explain_profile(r, h200()), "nvml_cost");
  ASSERT_EQ(over.size(), 1u);
  EXPECT_NE(over[0].find("as much as the rest or more: at this precision the rest is all the OS "
                         "waking the thread."),
            std::string::npos)
      << over[0];
  EXPECT_EQ(over[0].find("own work above it"), std::string::npos) << over[0];
  s.cost->wake_floor_fraction = 0.003;
  EXPECT_EQ(nlohmann::json(r).get<profile_result>(), r);
  // Results written before the floor existed load without it.
  auto old_json = nlohmann::json(r);
  old_json["nvml"]["cost"].erase("wake_floor_fraction");
  EXPECT_FALSE(old_json.get<profile_result>().nvml->cost->wake_floor_fraction.has_value());
  s.cost->wake_floor_fraction.reset();

  // With its calls, the result says which calls run at which cadence, and utilization's refresh.
  const auto cad = notes_for(explain_profile(r, h200()), "nvml");
  EXPECT_TRUE(any_contains(cad,
                           "Every 10 ms the sampler calls only nvmlDeviceGetUtilizationRates, "
                           "nvmlDeviceGetMemoryInfo; nvmlDeviceGetPowerUsage every 100 ms"));
  EXPECT_TRUE(any_contains(cad, "10x as often as it changes"));
  EXPECT_TRUE(any_contains(cad, "NVML refreshed utilization every 166 ms here (median)."));
  EXPECT_FALSE(any_contains(cad, "Power, temperature, the memory clock"));
  // The result round-trips with its calls.
  EXPECT_EQ(nlohmann::json(r).get<profile_result>(), r);

  // Power on the averaged cadence: named apart, with its interval and why.
  s.calls[2].cadence = "averaged";
  s.calls[2].interval_ms = 1000;
  s.calls.push_back(
      {"nvmlDeviceGetTemperature", {"temperature_c"}, "medium", 100, 12, 3, 4.0, std::nullopt});
  s.averaged_interval_ms = 1000;
  EXPECT_TRUE(any_contains(notes_for(explain_profile(r, h200()), "nvml"),
                           "nvmlDeviceGetMemoryInfo; nvmlDeviceGetTemperature every 100 ms; "
                           "nvmlDeviceGetPowerUsage every 1000 ms (a costly call, and NVML "
                           "averages power over the last second on Ampere and newer GPUs, GA100 "
                           "aside): each call costs"));
  // Clamped to the medium interval: power is named with the medium calls.
  s.calls[2].interval_ms = 100;
  EXPECT_TRUE(any_contains(notes_for(explain_profile(r, h200()), "nvml"),
                           "nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage every 100 ms: "));
  EXPECT_EQ(nlohmann::json(r).get<profile_result>(), r);
}

TEST(LessonProfile, ChangedEveryIsTheMedianGapBetweenChanges) {
  std::vector<gpu_sample> samples;
  for (int i = 0; i < 40; ++i) {
    gpu_sample x;
    x.time_s = 100.0 + 0.01 * i;
    // Changes at i = 3, 6, 9, ... (every 30 ms); every 5th sample did not read it.
    if (i % 5 != 4) x[gpu_metric::gpu_util_percent] = {metric_status::ok, double(i / 3)};
    x[gpu_metric::power_w] = {metric_status::ok, i < 20 ? 100.0 : 200.0};  // one change only
    samples.push_back(x);
  }
  const auto util = changed_every_ms(samples, gpu_metric::gpu_util_percent);
  ASSERT_TRUE(util.has_value());
  EXPECT_NEAR(*util, 30.0, 1e-6);
  EXPECT_FALSE(changed_every_ms(samples, gpu_metric::power_w).has_value());
  EXPECT_FALSE(changed_every_ms(samples, gpu_metric::temperature_c).has_value());
}

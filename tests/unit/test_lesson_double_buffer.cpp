// Tests of the double_buffer lesson part: JSON round trip, notes computed from the result, the
// table, and the upgrade of schema-1 files.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "lesson_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

std::vector<pipeline_batch> timeline(std::size_t n, double copy, double compute, bool serial) {
  std::vector<pipeline_batch> out;
  double t = 0.000125;
  for (std::size_t i = 0; i < n; ++i) {
    pipeline_batch b;
    b.copy_start_s = t;
    b.copy_end_s = t + copy;
    b.compute_start_s = serial ? b.copy_end_s : b.copy_end_s + 0.0000031 * static_cast<double>(i);
    b.compute_end_s = b.compute_start_s + compute;
    out.push_back(b);
    t = serial ? b.compute_end_s : b.copy_end_s + 0.0000007;
  }
  return out;
}

double_buffer_ratio ratio(double r, std::uint64_t k, double copy, double compute,
                          std::size_t batches, bool deep) {
  const auto n = static_cast<double>(batches);
  double_buffer_ratio x;
  x.compute_to_copy = r;
  x.lcg_iterations = k;
  x.compute_s = compute;
  x.modes.push_back(
      {"serial", 0, n * (copy + compute) * 1.013, timeline(batches, copy, compute, true), {}});
  x.modes.push_back({"double",
                     2,
                     (copy + compute + (n - 1) * std::max(copy, compute)) * 1.071,
                     timeline(batches, copy, compute, false),
                     {}});
  x.modes.push_back({"triple",
                     3,
                     (copy + compute + (n - 1) * std::max(copy, compute)) * 1.043,
                     timeline(batches, copy, compute, false),
                     {}});
  if (deep)
    x.modes.push_back({"depth 5", 5, 0.987654, timeline(batches, copy, compute * 1.1, false), {}});
  return x;
}

double_buffer_result sample_result() {
  double_buffer_result r;
  r.batch_bytes = 48ull << 20;
  r.batches = 7;
  r.depth = 5;
  r.repetitions = 6;
  r.copy_s = 0.0012345;
  r.ratios.push_back(ratio(0.25, 37, r.copy_s, 0.000312, 7, true));
  r.ratios.push_back(ratio(1.0, 913, r.copy_s, 0.0012901, 7, true));
  r.ratios.push_back(ratio(3.5, 4111, r.copy_s, 0.0043217, 7, true));
  r.timeline_trace_path = "/tmp/out/double_buffer_trace.json";
  r.timeline_trace_ratio = 1.0;
  trace_summary t;
  t.path = "/tmp/out/transfer.trace.json";
  t.source = "CUPTI 26.0";
  t.device = 3;
  t.kernels = 14;
  t.memcpys = 15;
  t.memsets = 3;
  t.api_calls = 117;
  t.syncs = 9;
  t.ranges = 2;
  t.flows = 29;
  t.dropped_records = 1;
  t.events = 301;
  t.write_s = 0.0042;
  t.schedule_wait = 1;
  t.schedule_warmup = 1;
  r.trace = t;
  return r;
}

device_facts no_facts() {
  return device_facts{};
}

std::string all_text(const std::vector<note>& notes, const std::string& table_id) {
  std::string s;
  for (const auto& n : notes)
    if (n.table_id == table_id) s += n.text + "\n";
  return s;
}

std::size_t column_of(const presentation::table& t, const std::string& key) {
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i].key == key) return i;
  throw std::out_of_range("no column " + key);
}

double number(const presentation::value& v) {
  return std::get<double>(v);
}

/// A schema-1 block as `gpu-basics transfer` wrote it: the table through presentation::to_json,
/// extra.double_buffer as add_double_buffer built it.
nlohmann::json v1_block(const double_buffer_result& r, bool with_extra) {
  nlohmann::json block = {{"tables", nlohmann::json::object()},
                          {"extra", nlohmann::json::object()}};
  auto tables = present_double_buffer(r);
  attach_notes(tables, explain_double_buffer(r, device_facts{}));
  for (const auto& t : tables) block["tables"][t.id] = presentation::to_json(t);
  if (with_extra) {
    nlohmann::json timelines = nlohmann::json::array();
    for (const auto& x : r.ratios) {
      nlohmann::json tl;
      tl["compute_to_copy"] = x.compute_to_copy;
      tl["lcg_iterations"] = *x.lcg_iterations;
      for (const auto& m : x.modes) {
        nlohmann::json bs = nlohmann::json::array();
        for (const auto& b : m.batches)
          bs.push_back({{"copy_start_s", b.copy_start_s},
                        {"copy_end_s", b.copy_end_s},
                        {"compute_start_s", b.compute_start_s},
                        {"compute_end_s", b.compute_end_s}});
        tl[m.name] = {{"total_s", m.total_s}, {"batches", bs}};
      }
      timelines.push_back(tl);
    }
    block["extra"]["double_buffer"] = {{"batch_bytes", r.batch_bytes},
                                       {"batches", r.batches},
                                       {"copy_s", r.copy_s},
                                       {"trace", *r.timeline_trace_path},
                                       {"timelines", timelines}};
    if (r.trace)
      block["extra"]["trace"] = {{"path", r.trace->path},
                                 {"source", r.trace->source},
                                 {"counts", {{"kernels", r.trace->kernels}}},
                                 {"events", r.trace->events},
                                 {"write_s", r.trace->write_s}};
  }
  return block;
}

}  // namespace

TEST(LessonDoubleBuffer, RoundTripsThroughJson) {
  const auto r = sample_result();
  const nlohmann::json j = r;
  EXPECT_EQ(j.get<double_buffer_result>(), r);
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<double_buffer_result>(), r);
  auto bare = r;
  bare.trace.reset();
  bare.depth.reset();
  bare.ratios[1].lcg_iterations.reset();
  EXPECT_EQ(nlohmann::json::parse(nlohmann::json(bare).dump()).get<double_buffer_result>(), bare);
  EXPECT_NE(nlohmann::json(bare).get<double_buffer_result>(), r);
}

TEST(LessonDoubleBuffer, ExplainStatesTheCapForItsBatchCount) {
  for (std::uint64_t n : {7ull, 32ull, 2ull}) {
    auto r = sample_result();
    r.batches = n;
    const double cap = 2.0 * static_cast<double>(n) / static_cast<double>(n + 1);
    const std::string text = all_text(explain_double_buffer(r, no_facts()), "double_buffer");
    EXPECT_NE(text.find(fmt::format("2n/(n+1) = {:.2f}x for n = {} batches", cap, n)),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("~2x"), std::string::npos);
  }
}

TEST(LessonDoubleBuffer, ExplainNamesTheTimelineFileAndAddsTheTraceNotes) {
  auto r = sample_result();
  auto notes = explain_double_buffer(r, no_facts());
  EXPECT_NE(all_text(notes, "double_buffer")
                .find("The timelines are in /tmp/out/double_buffer_trace.json"),
            std::string::npos);
  const std::string trace = all_text(notes, "trace");
  EXPECT_NE(trace.find("Source: CUPTI 26.0. 301 events written in 4.2 ms"), std::string::npos)
      << trace;
  r.trace.reset();
  r.timeline_trace_path.reset();
  r.batches = 0;  // unknown: no cap figure
  notes = explain_double_buffer(r, no_facts());
  EXPECT_TRUE(all_text(notes, "trace").empty());
  const std::string text = all_text(notes, "double_buffer");
  EXPECT_EQ(text.find("The timelines are in"), std::string::npos);
  EXPECT_EQ(text.find("2n/(n+1)"), std::string::npos);
  EXPECT_NE(text.find("At 1 the gain is largest."), std::string::npos);
}

TEST(LessonDoubleBuffer, PresentsOneRowPerRatioWithDerivedColumns) {
  const auto r = sample_result();
  const auto tables = present_double_buffer(r);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].id, "double_buffer");
  EXPECT_EQ(tables[1].id, "trace");
  const auto& t = tables[0];
  std::vector<std::string> keys;
  for (const auto& c : t.columns) keys.push_back(c.key);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"compute_to_copy", "copy_s", "compute_s", "serial_step_s",
                                      "double_step_s", "triple_step_s", "ideal_step_s", "speedup",
                                      "double_efficiency", "triple_efficiency", "bound"}));
  EXPECT_EQ(t.title,
            "Double-buffering: 7 batches of 48 MiB (pinned), copy stream + compute stream");
  ASSERT_EQ(t.rows.size(), 3u);
  const auto& x = r.ratios[2];
  const auto& row = t.rows[2];
  const double n = 7;
  const double ideal = r.copy_s + x.compute_s + (n - 1) * std::max(r.copy_s, x.compute_s);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "compute_to_copy")]), 3.5);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "copy_s")]), r.copy_s);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "serial_step_s")]), x.modes[0].total_s / n);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "triple_step_s")]), x.modes[2].total_s / n);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "ideal_step_s")]), ideal / n);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "speedup")]), x.modes[0].total_s / x.modes[1].total_s);
  EXPECT_DOUBLE_EQ(number(row[column_of(t, "double_efficiency")]), ideal / x.modes[1].total_s);
  EXPECT_EQ(std::get<std::string>(row[column_of(t, "bound")]), "compute");
  EXPECT_EQ(std::get<std::string>(t.rows[0][column_of(t, "bound")]), "copy");
  EXPECT_EQ(std::get<std::int64_t>(tables[1].rows[0][1]), 14);  // kernels
}

TEST(LessonDoubleBuffer, PresentLeavesAMissingModeEmpty) {
  auto r = sample_result();
  r.ratios[0].modes.erase(r.ratios[0].modes.begin() + 2);  // no triple
  const auto t = present_double_buffer(r)[0];
  EXPECT_TRUE(std::holds_alternative<std::monostate>(t.rows[0][column_of(t, "triple_step_s")]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(t.rows[0][column_of(t, "triple_efficiency")]));
}

TEST(LessonDoubleBuffer, FromV1RebuildsTimelinesFromExtra) {
  const auto r = sample_result();
  const auto back = double_buffer_from_v1(v1_block(r, true));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->batch_bytes, r.batch_bytes);
  EXPECT_EQ(back->batches, r.batches);
  EXPECT_EQ(back->depth, 5);  // from the "depth 5" mode
  EXPECT_FALSE(back->repetitions);
  EXPECT_DOUBLE_EQ(back->copy_s, r.copy_s);
  EXPECT_EQ(back->ratios, r.ratios);  // modes in serial, double, triple, depth 5 order
  EXPECT_EQ(back->timeline_trace_path, r.timeline_trace_path);
  EXPECT_EQ(back->timeline_trace_ratio, 1.0);
  ASSERT_TRUE(back->trace);
  EXPECT_EQ(*back->trace, *r.trace);
  // Rendered again, the table is the one schema 1 held.
  EXPECT_EQ(presentation::to_json(present_double_buffer(*back)[0]),
            presentation::to_json(present_double_buffer(r)[0]));
}

TEST(LessonDoubleBuffer, FromV1TableAloneKeepsTheTotals) {
  auto r = sample_result();
  r.trace.reset();
  auto block = v1_block(r, false);
  const auto back = double_buffer_from_v1(block);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->batches, 7u);
  EXPECT_EQ(back->batch_bytes, 48ull << 20);  // from the title
  EXPECT_FALSE(back->timeline_trace_path);
  EXPECT_FALSE(back->trace);
  ASSERT_EQ(back->ratios.size(), 3u);
  const auto& x = back->ratios[1];
  EXPECT_FALSE(x.lcg_iterations);
  ASSERT_EQ(x.modes.size(), 3u);
  EXPECT_EQ(x.modes[1].name, "double");
  EXPECT_DOUBLE_EQ(x.modes[1].total_s, r.ratios[1].modes[1].total_s);
  EXPECT_TRUE(x.modes[1].batches.empty());
  const auto again = present_double_buffer(*back)[0];
  const auto want = present_double_buffer(r)[0];
  ASSERT_EQ(again.rows.size(), want.rows.size());
  for (std::size_t c = 0; c < want.columns.size(); ++c)
    if (std::holds_alternative<double>(want.rows[1][c])) {
      EXPECT_NEAR(number(again.rows[1][c]), number(want.rows[1][c]),
                  1e-12 * std::abs(number(want.rows[1][c])))
          << want.columns[c].key;
    }
}

TEST(LessonDoubleBuffer, FromV1WithoutItsTableIsNothing) {
  const nlohmann::json block = {{"tables", {{"h2d_pinned", nlohmann::json::object()}}},
                                {"extra", nlohmann::json::object()}};
  EXPECT_FALSE(double_buffer_from_v1(block));
}

TEST(LessonDoubleBuffer, FromV1ThrowsOnMalformedBlocks) {
  const auto r = sample_result();
  auto bad_rows = v1_block(r, true);
  bad_rows["tables"]["double_buffer"]["rows"] = "none";
  EXPECT_ANY_THROW((void)double_buffer_from_v1(bad_rows));
  auto bad_cell = v1_block(r, false);
  bad_cell["tables"]["double_buffer"]["rows"][0]["compute_to_copy"] = "fast";
  gpu_basics::testing::expect_path_error([&] { (void)double_buffer_from_v1(bad_cell); },
                                         "tables.double_buffer.rows[0].compute_to_copy",
                                         "expected a number, got \"fast\"");
  auto bad_mode = v1_block(r, true);
  bad_mode["extra"]["double_buffer"]["timelines"][0]["quadruple"] = {
      {"total_s", 1.0}, {"batches", nlohmann::json::array()}};
  gpu_basics::testing::expect_path_error([&] { (void)double_buffer_from_v1(bad_mode); },
                                         "extra.double_buffer.timelines[0].quadruple",
                                         "not a pipeline mode");
  auto bad_timeline = v1_block(r, true);
  bad_timeline["extra"]["double_buffer"]["timelines"][1]["double"]["batches"][0]["copy_end_s"] =
      "late";
  gpu_basics::testing::expect_path_error(
      [&] { (void)double_buffer_from_v1(bad_timeline); },
      "extra.double_buffer.timelines[1].double.batches[0].copy_end_s",
      "expected a number, got \"late\"");
  gpu_basics::testing::expect_path_error(
      [] { (void)double_buffer_from_v1(nlohmann::json::array()); }, "",
      "expected an object, got a list");
}

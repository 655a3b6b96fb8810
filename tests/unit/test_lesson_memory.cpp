// Tests of the memory lesson: JSON round trip, notes computed from the result, the tables, and
// the upgrade of schema-1 files (tables as the old `gpu-basics memory` wrote them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "lesson_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

memory_result sample_result() {
  memory_result r;
  allocation_cost_result a;
  a.iterations = 17;
  a.warmup_iterations = 4;
  a.pairs_per_sample = 1000;
  a.rows = {{512, 3.1e-6, 2.4e-6, 2.05e-7, 4.1e-8},
            {MiB, 4.7e-6, 3.3e-6, 2.2e-7, 4.4e-8},
            {64 * MiB, 5.9e-5, 7.1e-5, 2.9e-7, 5.0e-8},
            {GiB, 2.1e-3, 9.0e-4, 3.2e-6, 5.7e-8}};
  r.allocation_cost = a;

  caching_result c;
  c.blocks = 4;
  c.block_bytes = 256 * MiB;
  constexpr auto M = static_cast<std::int64_t>(MiB);
  c.steps = {
      {"allocate_cold", "allocate 4 x 256 MiB (cold)", 1024 * M, 1024 * M, 4, 1.87e-3},
      {"free", "free all four", 0, 1024 * M, 4, 2.1e-6},
      {"allocate_again", "allocate 4 x 256 MiB again (cache hits)", 1024 * M, 1024 * M, 4, 1.3e-6},
      {"empty_cache", "free all, then empty_cache()", 0, 256 * M, 4, 9.4e-4},
      {"allocate_after_empty_cache", "allocate 256 MiB after empty_cache", 256 * M, 512 * M, 5,
       4.6e-4}};
  c.empty_cache = empty_cache_outcome{768 * MiB, 3, 256 * MiB, 1, 0};
  r.caching = c;

  peak_result p;
  p.weights_bytes = 512 * MiB;
  p.peak_allocated_bytes = static_cast<std::int64_t>(1536 * MiB);
  p.peak_reserved_bytes = static_cast<std::int64_t>(1600 * MiB);
  p.requested_bytes = 1472 * MiB;
  for (std::uint64_t l = 0; l < 8; ++l) p.activation_bytes.push_back((64 + 16 * l) * MiB);
  p.gradient_bytes = 64 * MiB;
  r.peak = p;

  trace_summary t;
  t.path = "/tmp/out/memory.trace.json";
  t.source = "CUPTI 26.0";
  t.device = 2;
  t.kernels = 0;
  t.memcpys = 3;
  t.memsets = 1;
  t.api_calls = 61;
  t.syncs = 4;
  t.ranges = 16;
  t.flows = 5;
  t.allocator_counter_events = 38;
  t.dropped_records = 2;
  t.events = 173;
  t.write_s = 0.0031;
  r.trace = t;

  pinned_result pn;
  pn.bytes = 256 * MiB;
  pn.use_pinned_memory = true;
  pn.allocate_repetitions = 3;
  pn.reuse_iterations = 17;
  pn.copy_iterations = 10;
  pn.pageable_allocate_s = 0.0412;
  pn.pageable_h2d_bytes_per_s = 9.8e9;
  pn.pinned_allocate_s = 0.0731;
  pn.pinned_reuse_s = 6.3e-7;
  pn.pinned_h2d_bytes_per_s = 53.1e9;
  pn.pool = pinned_pool_outcome{1, 0, 18, 0.071, 0.0};
  r.pinned = pn;

  fragmentation_result f;
  f.large_bytes = 64 * MiB;
  f.small_bytes = 2 * MiB;
  f.small_requests = 8;
  f.rows = {{std::nullopt, 0.6667, 2 * MiB, static_cast<std::int64_t>(128 * MiB), true},
            {32 * MiB, 0.125, 14 * MiB, static_cast<std::int64_t>(80 * MiB), false}};
  r.fragmentation = f;
  return r;
}

std::string notes_of(const std::vector<note>& notes, const std::string& table_id) {
  std::string out;
  for (const auto& n : notes)
    if (n.table_id == table_id) out += n.text + "\n";
  return out;
}

const presentation::table& table_named(const std::vector<presentation::table>& ts,
                                       const std::string& id) {
  const auto it = std::find_if(ts.begin(), ts.end(), [&](const auto& t) { return t.id == id; });
  if (it == ts.end()) throw std::out_of_range("no table " + id);
  return *it;
}

std::vector<std::string> keys_of(const presentation::table& t) {
  std::vector<std::string> k;
  for (const auto& c : t.columns) k.push_back(c.key);
  return k;
}

// ---- schema 1, as the old cmd_memory.cpp wrote it -----------------------------------------

nlohmann::json v1_table(const std::string& id, const std::string& title,
                        const std::vector<std::string>& keys, const nlohmann::json& rows,
                        const std::vector<std::string>& notes = {}) {
  return {{"id", id}, {"title", title}, {"columns", keys}, {"rows", rows}, {"notes", notes}};
}

nlohmann::json v1_block() {
  nlohmann::json tables = nlohmann::json::object();
  const auto cost_row = [](const char* size, double m, double f, double a, double c) {
    return nlohmann::json{{"bytes", size},
                          {"cuda_malloc_s", m},
                          {"cuda_free_s", f},
                          {"malloc_async_pair_s", a},
                          {"cached_pair_s", c},
                          {"speedup_vs_cuda_malloc", (m + f) / c},
                          {"speedup_vs_malloc_async", a / c}};
  };
  tables["allocation_cost"] =
      v1_table("allocation_cost", "What one allocation + free costs (host clock, median)",
               {"bytes", "cuda_malloc_s", "cuda_free_s", "malloc_async_pair_s", "cached_pair_s",
                "speedup_vs_cuda_malloc", "speedup_vs_malloc_async"},
               {cost_row("512 B", 3.0e-6, 2.0e-6, 2.0e-7, 4.0e-8),
                cost_row("1 MiB", 4.0e-6, 3.0e-6, 2.1e-7, 4.2e-8),
                cost_row("64 MiB", 6.0e-5, 7.0e-5, 2.8e-7, 4.9e-8),
                cost_row("1 GiB", 2.0e-3, 1.0e-3, 3.0e-6, 5.5e-8)});
  const auto step = [](const char* s, std::int64_t a, std::int64_t r, std::int64_t d, double t) {
    return nlohmann::json{{"step", s},
                          {"allocated_bytes", a},
                          {"reserved_bytes", r},
                          {"device_allocations", d},
                          {"step_s", t}};
  };
  const auto M = static_cast<std::int64_t>(MiB);
  tables["caching"] =
      v1_table("caching", "Allocate, free, allocate again, empty_cache (4 x 256 MiB)",
               {"step", "allocated_bytes", "reserved_bytes", "device_allocations", "step_s"},
               {step("allocate 4 x 256 MiB (cold)", 1024 * M, 1024 * M, 4, 2e-3),
                step("free all four", 0, 1024 * M, 4, 2e-6),
                step("allocate 4 x 256 MiB again (cache hits)", 1024 * M, 1024 * M, 4, 1e-6),
                step("free all, then empty_cache()", 0, 0, 4, 1e-3),
                step("allocate 256 MiB after empty_cache", 256 * M, 256 * M, 5, 5e-4)});
  tables["peak"] = v1_table(
      "peak", "Peak memory of a workload (reset_peak_stats, then a forward/backward-like pass)",
      {"quantity", "bytes"},
      {{{"quantity", "allocated before the pass (weights)"}, {"bytes", 512 * M}},
       {{"quantity", "peak allocated during the pass"}, {"bytes", 1536 * M}},
       {{"quantity", "peak reserved during the pass"}, {"bytes", nullptr}},
       {{"quantity", "sum of all allocations in the pass"}, {"bytes", 1472 * M}}});
  tables["trace"] = v1_table("trace", "Trace written to out/mem.json", {"what", "count"},
                             {{{"what", "kernels"}, {"count", 0}},
                              {{"what", "memory copies"}, {"count", 2}},
                              {{"what", "CUDA runtime API calls"}, {"count", 44}},
                              {{"what", "user ranges (scoped_range / NVTX)"}, {"count", 16}},
                              {{"what", "allocator counter samples"}, {"count", 37}},
                              {{"what", "trace events written"}, {"count", 150}}},
                             {"- Source: CUPTI 12.4. 150 events written in 2.5 ms. Open the file "
                              "in https://ui.perfetto.dev (or chrome://tracing): GPU 1 holds a "
                              "track per stream and the counters; the CPU process a track per "
                              "thread with API calls, waits and user ranges."});
  tables["pinned_vs_pageable"] =
      v1_table("pinned_vs_pageable", "Host memory for a 256 MiB tensor: pinned vs pageable",
               {"memory", "allocate_s", "reuse_s", "h2d_bytes_per_s"},
               {{{"memory", "pageable (malloc + first touch)"},
                 {"allocate_s", 0.04},
                 {"reuse_s", nullptr},
                 {"h2d_bytes_per_s", 1.0e10}},
                {{"memory", "pinned (cudaHostAlloc)"},
                 {"allocate_s", 0.07},
                 {"reuse_s", 6e-7},
                 {"h2d_bytes_per_s", 5.0e10}}});
  tables["fragmentation"] = v1_table(
      "fragmentation", "Fragmentation: a cached 64 MiB block, 2 MiB requests, then 64 MiB again",
      {"max_split_size", "fragmentation", "largest_free_bytes", "reserved_bytes", "second_64mib"},
      {{{"max_split_size", "unlimited"},
        {"fragmentation", 0.5},
        {"largest_free_bytes", 2 * M},
        {"reserved_bytes", 128 * M},
        {"second_64mib", "a new segment (cudaMalloc)"}},
       {{"max_split_size", "32 MiB"},
        {"fragmentation", 0.0},
        {"largest_free_bytes", 64 * M},
        {"reserved_bytes", 80 * M},
        {"second_64mib", "the cache"}}});
  nlohmann::json extra = {
      {"empty_cache",
       {{"released_bytes", 1024 * M},
        {"released_segments", 4},
        {"kept_bytes", 0},
        {"kept_in_use_segments", 0},
        {"kept_pending_segments", 0}}},
      {"peak_stats",
       {{"allocated_bytes",
         {{"current", 0}, {"peak", 1536 * M}, {"allocated", 1984 * M}, {"freed", 1984 * M}}},
        {"reserved_bytes",
         {{"current", 1600 * M}, {"peak", 1700 * M}, {"allocated", 1700 * M}, {"freed", 0}}},
        {"device_allocations", 9}}},
      {"pinned_pool",
       {{"backend_allocations", 1},
        {"backend_frees", 0},
        {"cache_hits", 21},
        {"pin_seconds", 0.069},
        {"unpin_seconds", 0.0}}},
      {"trace",
       {{"path", "out/mem.json"}, {"source", "CUPTI 12.4"}, {"events", 150}, {"write_s", 0.0025}}}};
  return {{"tables", tables}, {"extra", extra}};
}

}  // namespace

// ---- result <-> JSON ----------------------------------------------------------------------

TEST(MemoryLesson, ResultRoundTripsThroughJson) {
  const memory_result r = sample_result();
  const nlohmann::json j = r;
  EXPECT_EQ(j.get<memory_result>(), r);
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<memory_result>(), r);
  EXPECT_EQ(j["allocation_cost"]["rows"][3]["bytes"], GiB);  // bytes as an integer, not text
}

TEST(MemoryLesson, AbsentPartsRoundTripAsNull) {
  memory_result r = sample_result();
  r.trace.reset();
  r.pinned->use_pinned_memory = false;
  r.pinned->pinned_allocate_s.reset();
  r.pinned->pool.reset();
  r.fragmentation->rows[1].max_split_size.reset();
  r.allocation_cost.reset();
  const nlohmann::json j = r;
  EXPECT_TRUE(j["trace"].is_null());
  EXPECT_TRUE(j["allocation_cost"].is_null());
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<memory_result>(), r);
  EXPECT_NE(nlohmann::json(sample_result()).get<memory_result>(), r);
}

// ---- explain ------------------------------------------------------------------------------

TEST(MemoryLesson, AllocationCostNotesStateMeasuredTimes) {
  const memory_result r = sample_result();
  const auto& rows = r.allocation_cost->rows;
  const std::string text = notes_of(explain_memory(r, device_facts{}), "allocation_cost");
  // cudaMalloc + cudaFree at the smallest and the largest size.
  EXPECT_NE(text.find(fmt::format("{:.1f} us for 512 B",
                                  (rows[0].cuda_malloc_s + rows[0].cuda_free_s) * 1e6)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("{:.2f} ms for 1 GiB",
                                  (rows[3].cuda_malloc_s + rows[3].cuda_free_s) * 1e3)),
            std::string::npos)
      << text;
  // Cache hits: the fastest to the slowest.
  EXPECT_NE(text.find(fmt::format("{:.0f} ns to {:.0f} ns here", 4.1e-8 * 1e9, 5.7e-8 * 1e9)),
            std::string::npos)
      << text;
  // cudaMallocAsync at 1 GiB against both.
  const double raw = rows[3].cuda_malloc_s + rows[3].cuda_free_s;
  EXPECT_NE(text.find(fmt::format("{:.1f}x faster than cudaMalloc + cudaFree",
                                  raw / rows[3].malloc_async_pair_s)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("{:.1f}x slower than a host-side cache hit",
                                  rows[3].malloc_async_pair_s / rows[3].cached_pair_s)),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("tens of"), std::string::npos) << text;
}

TEST(MemoryLesson, CachingNotesFollowTheSteps) {
  memory_result r = sample_result();
  const std::string text = notes_of(explain_memory(r, device_facts{}), "caching");
  EXPECT_NE(text.find("allocated drops to 0 MiB but reserved stays at 1024 MiB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("released 3 segment(s) (768 MiB) and kept 1 (1 in use, 0 waiting"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format(
                "({:.1f} us for one 256 MiB block here, against {:.1f} us for 4 cache hits)",
                4.6e-4 * 1e6, 1.3e-6 * 1e6)),
            std::string::npos)
      << text;
  // Without empty_cache's report (schema 1 may lack it) its note is left out.
  r.caching->empty_cache.reset();
  r.caching->steps[1].reserved_bytes = static_cast<std::int64_t>(768 * MiB);
  const auto notes = explain_memory(r, device_facts{});
  const std::string without = notes_of(notes, "caching");
  EXPECT_EQ(without.find("empty_cache() released"), std::string::npos);
  EXPECT_NE(without.find("reserved stays at 768 MiB"), std::string::npos) << without;
}

TEST(MemoryLesson, PeakNoteComparesPeakWithTheSum) {
  memory_result r = sample_result();
  r.peak->peak_allocated_bytes = static_cast<std::int64_t>(1700 * MiB);
  r.peak->requested_bytes = 2345 * MiB;
  const std::string text = notes_of(explain_memory(r, device_facts{}), "peak");
  EXPECT_NE(text.find(fmt::format("({} MiB above the weights)", 1700 - 512)), std::string::npos)
      << text;
  EXPECT_NE(text.find("not the sum of every allocation (2345 MiB)"), std::string::npos) << text;
}

TEST(MemoryLesson, PinnedNotesComputeTheRatioAndTheLinkShare) {
  const memory_result r = sample_result();
  device_facts facts;
  facts.link_bytes_per_s = 63.015e9;
  const std::string text = notes_of(explain_memory(r, facts), "pinned_vs_pageable");
  const double ratio = 53.1e9 / 9.8e9;
  EXPECT_NE(text.find(fmt::format(
                "H2D runs {:.1f}x slower here (9.8 GB/s against 53.1 GB/s pinned)", ratio)),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(fmt::format("reached {:.0f}% of the PCIe link's 63.0 GB/s", 100.0 * 53.1 / 63.015)),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("of 256 MiB took 73.10 ms here; malloc + first touch + free 41.20 ms"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("a reuse took 630 ns here"), std::string::npos) << text;
  EXPECT_NE(text.find("(1 block(s) pinned, 18 cache hit(s) in all)"), std::string::npos) << text;
  EXPECT_EQ(text.find("several times"), std::string::npos) << text;
  // Without a known link, no link sentence.
  EXPECT_EQ(notes_of(explain_memory(r, device_facts{}), "pinned_vs_pageable").find("PCIe link"),
            std::string::npos);
}

TEST(MemoryLesson, PageableOnlyHasOneNoteAndOneRow) {
  memory_result r = sample_result();
  r.pinned->use_pinned_memory = false;
  r.pinned->pinned_allocate_s.reset();
  r.pinned->pinned_reuse_s.reset();
  r.pinned->pinned_h2d_bytes_per_s.reset();
  r.pinned->pool.reset();
  const auto notes = explain_memory(r, device_facts{});
  const auto n = std::count_if(notes.begin(), notes.end(),
                               [](const note& x) { return x.table_id == "pinned_vs_pageable"; });
  EXPECT_EQ(n, 1);
  EXPECT_NE(notes_of(notes, "pinned_vs_pageable").find("memory.use_pinned_memory is false"),
            std::string::npos);
  EXPECT_EQ(table_named(present_memory(r), "pinned_vs_pageable").rows.size(), 1u);
}

TEST(MemoryLesson, FragmentationNotesFollowTheRows) {
  memory_result r = sample_result();
  std::string text = notes_of(explain_memory(r, device_facts{}), "fragmentation");
  EXPECT_NE(text.find(fmt::format("({:.1f}% fragmentation here)", 0.6667 * 100)), std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "the next 64 MiB request does not fit in any of them, and a new segment is reserved"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("With max_split_size = 32 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("the 2 MiB requests get their own segments"), std::string::npos) << text;
  r.fragmentation->rows[0].new_segment = false;
  r.fragmentation->rows[1].max_split_size = 48 * MiB;
  text = notes_of(explain_memory(r, device_facts{}), "fragmentation");
  EXPECT_NE(text.find("yet the next 64 MiB request was served from the cache here"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("With max_split_size = 48 MiB"), std::string::npos) << text;
}

TEST(MemoryLesson, TraceNotesComeFromTheSummary) {
  const memory_result r = sample_result();
  const std::string text = notes_of(explain_memory(r, device_facts{}), "trace");
  EXPECT_NE(text.find("Source: CUPTI 26.0. 173 events written in 3.1 ms"), std::string::npos)
      << text;
  EXPECT_NE(text.find("GPU 2 holds"), std::string::npos) << text;
}

// ---- present ------------------------------------------------------------------------------

TEST(MemoryLesson, TablesKeepTodaysIdsColumnsAndRows) {
  const memory_result r = sample_result();
  const auto tables = present_memory(r);
  std::vector<std::string> ids;
  for (const auto& t : tables) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"allocation_cost", "caching", "peak", "trace",
                                           "pinned_vs_pageable", "fragmentation"}));

  const auto& cost = table_named(tables, "allocation_cost");
  EXPECT_EQ(keys_of(cost),
            (std::vector<std::string>{"bytes", "cuda_malloc_s", "cuda_free_s",
                                      "malloc_async_pair_s", "cached_pair_s",
                                      "speedup_vs_cuda_malloc", "speedup_vs_malloc_async"}));
  ASSERT_EQ(cost.rows.size(), 4u);
  EXPECT_EQ(std::get<std::string>(cost.rows[0][0]), "512 B");
  EXPECT_EQ(std::get<std::string>(cost.rows[3][0]), "1 GiB");
  const auto& big = r.allocation_cost->rows[3];
  EXPECT_DOUBLE_EQ(std::get<double>(cost.rows[3][1]), big.cuda_malloc_s);
  EXPECT_DOUBLE_EQ(std::get<double>(cost.rows[3][5]),
                   (big.cuda_malloc_s + big.cuda_free_s) / big.cached_pair_s);
  EXPECT_DOUBLE_EQ(std::get<double>(cost.rows[3][6]), big.malloc_async_pair_s / big.cached_pair_s);

  const auto& caching = table_named(tables, "caching");
  EXPECT_EQ(caching.title, "Allocate, free, allocate again, empty_cache (4 x 256 MiB)");
  EXPECT_EQ(keys_of(caching), (std::vector<std::string>{"step", "allocated_bytes", "reserved_bytes",
                                                        "device_allocations", "step_s"}));
  ASSERT_EQ(caching.rows.size(), 5u);
  EXPECT_EQ(std::get<std::string>(caching.rows[1][0]), "free all four");
  EXPECT_EQ(std::get<std::int64_t>(caching.rows[4][3]), 5);

  const auto& peak = table_named(tables, "peak");
  EXPECT_EQ(keys_of(peak), (std::vector<std::string>{"quantity", "bytes"}));
  ASSERT_EQ(peak.rows.size(), 4u);
  EXPECT_EQ(std::get<std::int64_t>(peak.rows[1][1]), *r.peak->peak_allocated_bytes);
  EXPECT_EQ(std::get<std::int64_t>(peak.rows[3][1]),
            static_cast<std::int64_t>(r.peak->requested_bytes));

  const auto& trace = table_named(tables, "trace");
  EXPECT_EQ(trace.title, "Trace written to /tmp/out/memory.trace.json");

  const auto& pinned = table_named(tables, "pinned_vs_pageable");
  EXPECT_EQ(pinned.title, "Host memory for a 256 MiB tensor: pinned vs pageable");
  EXPECT_EQ(keys_of(pinned),
            (std::vector<std::string>{"memory", "allocate_s", "reuse_s", "h2d_bytes_per_s"}));
  ASSERT_EQ(pinned.rows.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(pinned.rows[0][2]));
  EXPECT_DOUBLE_EQ(std::get<double>(pinned.rows[1][3]), 53.1e9);

  const auto& frag = table_named(tables, "fragmentation");
  EXPECT_EQ(frag.title, "Fragmentation: a cached 64 MiB block, 2 MiB requests, then 64 MiB again");
  EXPECT_EQ(keys_of(frag),
            (std::vector<std::string>{"max_split_size", "fragmentation", "largest_free_bytes",
                                      "reserved_bytes", "second_64mib"}));
  ASSERT_EQ(frag.rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(frag.rows[0][0]), "unlimited");
  EXPECT_EQ(std::get<std::string>(frag.rows[1][0]), "32 MiB");
  EXPECT_EQ(std::get<std::string>(frag.rows[0][4]), "a new segment (cudaMalloc)");
  EXPECT_EQ(std::get<std::string>(frag.rows[1][4]), "the cache");
  EXPECT_DOUBLE_EQ(std::get<double>(frag.rows[1][1]), 0.125);
}

TEST(MemoryLesson, UntracedRunHasNoTraceTable) {
  memory_result r = sample_result();
  r.trace.reset();
  r.peak->peak_reserved_bytes.reset();
  const auto tables = present_memory(r);
  EXPECT_EQ(tables.size(), 5u);
  EXPECT_TRUE(
      std::none_of(tables.begin(), tables.end(), [](const auto& t) { return t.id == "trace"; }));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(table_named(tables, "peak").rows[2][1]));
}

// ---- schema 1 -----------------------------------------------------------------------------

TEST(MemoryLesson, FromV1RebuildsEveryPart) {
  const memory_result r = memory_from_v1(v1_block());
  ASSERT_TRUE(r.allocation_cost);
  ASSERT_EQ(r.allocation_cost->rows.size(), 4u);
  EXPECT_EQ(r.allocation_cost->rows[0].bytes, 512u);
  EXPECT_EQ(r.allocation_cost->rows[1].bytes, MiB);
  EXPECT_EQ(r.allocation_cost->rows[2].bytes, 64 * MiB);
  EXPECT_EQ(r.allocation_cost->rows[3].bytes, GiB);
  EXPECT_DOUBLE_EQ(r.allocation_cost->rows[3].cuda_malloc_s, 2.0e-3);
  EXPECT_DOUBLE_EQ(r.allocation_cost->rows[2].cached_pair_s, 4.9e-8);
  EXPECT_FALSE(r.allocation_cost->iterations);

  ASSERT_TRUE(r.caching);
  EXPECT_EQ(r.caching->blocks, 4);
  EXPECT_EQ(r.caching->block_bytes, 256 * MiB);
  ASSERT_EQ(r.caching->steps.size(), 5u);
  EXPECT_EQ(r.caching->steps[1].kind, "free");
  EXPECT_EQ(r.caching->steps[4].kind, "allocate_after_empty_cache");
  EXPECT_EQ(r.caching->steps[4].label, "allocate 256 MiB after empty_cache");
  EXPECT_EQ(r.caching->steps[4].device_allocations, 5);
  ASSERT_TRUE(r.caching->empty_cache);
  EXPECT_EQ(r.caching->empty_cache->released_segments, 4u);
  EXPECT_EQ(r.caching->empty_cache->released_bytes, 1024 * MiB);

  ASSERT_TRUE(r.peak);
  EXPECT_EQ(r.peak->weights_bytes, 512 * MiB);
  EXPECT_EQ(r.peak->peak_allocated_bytes, static_cast<std::int64_t>(1536 * MiB));
  EXPECT_EQ(r.peak->peak_reserved_bytes, static_cast<std::int64_t>(1700 * MiB));  // from peak_stats
  EXPECT_EQ(r.peak->requested_bytes, 1472 * MiB);
  EXPECT_TRUE(r.peak->activation_bytes.empty());

  ASSERT_TRUE(r.trace);
  EXPECT_EQ(r.trace->path, "out/mem.json");
  EXPECT_EQ(r.trace->source, "CUPTI 12.4");
  EXPECT_EQ(r.trace->device, 1);
  EXPECT_EQ(r.trace->memcpys, 2);
  EXPECT_EQ(r.trace->api_calls, 44);
  EXPECT_EQ(r.trace->allocator_counter_events, 37);
  EXPECT_EQ(r.trace->events, 150);
  EXPECT_DOUBLE_EQ(r.trace->write_s, 0.0025);

  ASSERT_TRUE(r.pinned);
  EXPECT_EQ(r.pinned->bytes, 256 * MiB);
  EXPECT_TRUE(r.pinned->use_pinned_memory);
  EXPECT_DOUBLE_EQ(r.pinned->pageable_allocate_s, 0.04);
  EXPECT_EQ(r.pinned->pageable_h2d_bytes_per_s, 1.0e10);
  EXPECT_EQ(r.pinned->pinned_reuse_s, 6e-7);
  EXPECT_EQ(r.pinned->pinned_h2d_bytes_per_s, 5.0e10);
  ASSERT_TRUE(r.pinned->pool);
  EXPECT_EQ(r.pinned->pool->cache_hits, 21);
  EXPECT_DOUBLE_EQ(r.pinned->pool->pin_s, 0.069);

  ASSERT_TRUE(r.fragmentation);
  EXPECT_EQ(r.fragmentation->large_bytes, 64 * MiB);
  EXPECT_EQ(r.fragmentation->small_bytes, 2 * MiB);
  ASSERT_EQ(r.fragmentation->rows.size(), 2u);
  EXPECT_FALSE(r.fragmentation->rows[0].max_split_size);
  EXPECT_EQ(r.fragmentation->rows[1].max_split_size, 32 * MiB);
  EXPECT_TRUE(r.fragmentation->rows[0].new_segment);
  EXPECT_FALSE(r.fragmentation->rows[1].new_segment);
  EXPECT_EQ(r.fragmentation->rows[1].largest_free_bytes, 64 * MiB);
}

TEST(MemoryLesson, FromV1TablesPresentAsTheyWereSaved) {
  const nlohmann::json block = v1_block();
  const auto tables = present_memory(memory_from_v1(block));
  for (const char* id : {"allocation_cost", "caching", "fragmentation", "pinned_vs_pageable"}) {
    const nlohmann::json again = presentation::to_json(table_named(tables, id));
    EXPECT_EQ(again["title"], block["tables"][id]["title"]) << id;
    EXPECT_EQ(again["columns"], block["tables"][id]["columns"]) << id;
    ASSERT_EQ(again["rows"].size(), block["tables"][id]["rows"].size()) << id;
    for (std::size_t i = 0; i < again["rows"].size(); ++i)
      for (const auto& [k, v] : block["tables"][id]["rows"][i].items()) {
        if (v.is_number_float())
          EXPECT_NEAR(again["rows"][i][k].get<double>(), v.get<double>(),
                      1e-9 * std::abs(v.get<double>()))
              << id << " " << k;
        else
          EXPECT_EQ(again["rows"][i][k], v) << id << " " << k;
      }
  }
}

TEST(MemoryLesson, FromV1ReadsSizesAsFormatBytesWroteThem) {
  for (const auto& [text, bytes] :
       std::vector<std::pair<std::string, std::uint64_t>>{{"512 B", 512},
                                                          {"1.0 MiB", MiB},
                                                          {"64.0 MiB", 64 * MiB},
                                                          {"1.0 GiB", GiB},
                                                          {"1 GiB", GiB},
                                                          {"1.5 GiB", 3 * GiB / 2},
                                                          {"4 KiB", 4096},
                                                          {"2 TiB", 2048 * GiB}}) {
    nlohmann::json block = v1_block();
    block["tables"]["allocation_cost"]["rows"][0]["bytes"] = text;
    EXPECT_EQ(memory_from_v1(block).allocation_cost->rows[0].bytes, bytes) << text;
  }
}

TEST(MemoryLesson, FromV1CopesWithMissingPieces) {
  nlohmann::json block = v1_block();
  block["extra"] = nlohmann::json::object();
  block["tables"].erase("trace");
  block["tables"].erase("fragmentation");
  block["tables"]["pinned_vs_pageable"]["rows"].erase(1);
  const memory_result r = memory_from_v1(block);
  EXPECT_FALSE(r.trace);
  EXPECT_FALSE(r.fragmentation);
  EXPECT_FALSE(r.caching->empty_cache);
  EXPECT_FALSE(r.peak->peak_reserved_bytes);
  EXPECT_FALSE(r.pinned->use_pinned_memory);
  EXPECT_FALSE(r.pinned->pool);
  // Every note whose inputs are missing is left out; the rest still render.
  const auto notes = explain_memory(r, device_facts{});
  EXPECT_EQ(notes_of(notes, "caching").find("empty_cache() released"), std::string::npos);
  EXPECT_NE(notes_of(notes, "pinned_vs_pageable").find("use_pinned_memory is false"),
            std::string::npos);
  EXPECT_EQ(present_memory(r).size(), 4u);
}

TEST(MemoryLesson, FromV1RejectsMalformedBlocks) {
  const auto with = [](auto edit) {
    nlohmann::json b = v1_block();
    edit(b);
    return b;
  };
  gpu_basics::testing::expect_path_error([] { (void)memory_from_v1(nlohmann::json::object()); },
                                         "tables", "missing");
  EXPECT_THROW((void)memory_from_v1(with(
                   [](auto& b) { b["tables"]["allocation_cost"]["rows"][1]["bytes"] = "lots"; })),
               format_error);
  EXPECT_THROW((void)memory_from_v1(with(
                   [](auto& b) { b["tables"]["allocation_cost"]["rows"][1]["bytes"] = "1 MB"; })),
               format_error);
  gpu_basics::testing::expect_path_error(
      [&] {
        (void)memory_from_v1(with(
            [](auto& b) { b["tables"]["allocation_cost"]["rows"][0].erase("cached_pair_s"); }));
      },
      "tables.allocation_cost.rows[0].cached_pair_s", "missing");
  EXPECT_THROW((void)memory_from_v1(with([](auto& b) { b["tables"]["caching"]["rows"] = "none"; })),
               format_error);
  EXPECT_THROW(
      (void)memory_from_v1(with([](auto& b) { b["tables"]["caching"]["title"] = "Allocate"; })),
      format_error);
  EXPECT_THROW((void)memory_from_v1(with([](auto& b) {
                 b["tables"]["caching"]["title"] = "Allocate (99999999999 x 256 MiB)";
               })),
               format_error);
  EXPECT_THROW((void)memory_from_v1(with([](auto& b) {
                 b["tables"]["allocation_cost"]["rows"][1]["bytes"] = "99999999999 TiB";
               })),
               format_error);
  EXPECT_THROW(
      (void)memory_from_v1(with([](auto& b) { b["tables"]["peak"]["rows"][0]["quantity"] = "?"; })),
      format_error);
  gpu_basics::testing::expect_path_error(
      [&] {
        (void)memory_from_v1(
            with([](auto& b) { b["tables"]["fragmentation"]["rows"][0]["second_64mib"] = 3; }));
      },
      "tables.fragmentation.rows[0].second_64mib", "expected a string, got 3");
  gpu_basics::testing::expect_path_error(
      [&] {
        (void)memory_from_v1(with([](auto& b) {
          b["extra"]["pinned_pool"] = {{"backend_allocations", 1},
                                       {"backend_frees", 1},
                                       {"cache_hits", "x"},
                                       {"pin_seconds", 0.1},
                                       {"unpin_seconds", 0.1}};
        }));
      },
      "extra.pinned_pool.cache_hits", "expected an integer, got \"x\"");
}

// ---- the registry entry -------------------------------------------------------------------

TEST(MemoryLesson, RegistryEntryRendersAndUpgrades) {
  const lesson l = memory_lesson();
  EXPECT_EQ(l.name, "memory");
  EXPECT_EQ(l.description,
            "Lesson: device allocation, the caching allocator, pinned memory, empty_cache");
  EXPECT_TRUE(l.traces);
  const auto rep = l.render(nlohmann::json(sample_result()), device_facts{});
  EXPECT_EQ(rep.lesson, "memory");
  ASSERT_EQ(rep.tables.size(), 6u);
  EXPECT_EQ(rep.tables[0].notes.size(), 2u);  // attached under allocation_cost
  const nlohmann::json upgraded = l.upgrade_v1(v1_block());
  EXPECT_EQ(upgraded.get<memory_result>(), memory_from_v1(v1_block()));
  EXPECT_EQ(l.render(upgraded, device_facts{}).tables.size(), 6u);
  EXPECT_THROW((void)l.render(nlohmann::json{{"caching", {{"blocks", "four"}}}}, device_facts{}),
               format_error);
}

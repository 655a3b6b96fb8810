// advise: replays under limits, the bisected smallest limit, the policy search and the stranded
// split, on traces whose answers are known by construction and on the committed H200 snapshot.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/report/advice.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "run.hpp"

namespace gb = gpu_basics;

namespace {

const std::string kData = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data";
constexpr std::size_t MiB = std::size_t{1} << 20, GiB = MiB << 10;

using ev = gb::replay_event;
ev alloc(std::uint64_t id, std::size_t bytes, gb::stream_handle s = 0) {
  return {ev::op::alloc, id, bytes, s};
}
ev release(std::uint64_t id) {
  return {ev::op::free, id, 0, 0};
}

/// A trace and its preparation, for the replays that take a prepared trace (it points into the
/// events: neither copied nor moved).
struct held_trace {
  explicit held_trace(std::vector<ev> e)
      : events(std::move(e)), prepared(gb::prepare_trace(events)) {}
  held_trace(const held_trace&) = delete;
  held_trace& operator=(const held_trace&) = delete;
  operator const gb::prepared_trace&() const { return prepared; }  // NOLINT: used in place
  std::vector<ev> events;
  gb::prepared_trace prepared;
};
held_trace held(std::vector<ev> events) {
  return held_trace(std::move(events));
}

/// One buffer that grows: 21, 23, ... 61 MiB, each allocated then freed. No cached block ever
/// serves the next (larger) request, so the defaults reserve every size: 22 + 24 + ... + 62 MiB.
/// An expandable segment grows its one range instead, mapping 20 MiB at a time as PyTorch maps
/// the large pool (80 MiB), which no other policy beats: rounding up to power-of-two divisions
/// can only add. Under a limit, the defaults free the cache and retry, so 62 MiB (61 MiB rounded
/// to 2 MiB) is the smallest limit under which the defaults fit, and 80 MiB expandable's.
std::vector<ev> growing_buffer() {
  std::vector<ev> v;
  std::uint64_t id = 1;
  for (std::size_t mib = 21; mib <= 61; mib += 2) {
    v.push_back(alloc(id, mib * MiB));
    v.push_back(release(id++));
  }
  return v;
}

std::size_t sum_of_parts(const gb::stranded_split& s) {
  std::size_t n = 0;
  for (const auto& p : s.parts) n += p.bytes;
  return n;
}

}  // namespace

TEST(Advise, GrowingBufferRecommendsExpandableSegments) {
  const auto trace = growing_buffer();
  const auto a = gb::advise_snapshot(gb::torch_snapshot_of(trace), "growing", 0,
                                     gb::advise_policies({}), {}, 2);
  std::size_t defaults_peak = 0;
  for (std::size_t mib = 22; mib <= 62; mib += 2) defaults_peak += mib * MiB;
  ASSERT_TRUE(a.policies[0].result);
  EXPECT_EQ(a.policies[0].result->peak_reserved, defaults_peak);
  EXPECT_EQ(a.policies[a.recommended].conf, "expandable_segments:True");
  EXPECT_EQ(a.policies[a.recommended].result->peak_reserved, 80 * MiB);
  EXPECT_EQ(a.defaults.smallest_limit, 62 * MiB);
  EXPECT_EQ(a.recommendation.smallest_limit, 80 * MiB);
  EXPECT_EQ(a.policies.size(), 48u);  // no garbage collection without a limit to fit
  EXPECT_EQ(a.live_peak, 61 * MiB);
  const auto tables = gb::advice_tables(a);
  ASSERT_FALSE(tables.empty());
  bool says_line = false;
  for (const auto& n : tables[0].notes)
    says_line = says_line ||
                n == "Use with PyTorch: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
  EXPECT_TRUE(says_line);
}

TEST(Advise, FitPicksTheSimplestPolicyThatFits) {
  const auto trace = growing_buffer();
  // 100 MiB: the defaults fit (the cache is freed at the limit); 40 MiB: nothing (live 61 MiB).
  const auto a = gb::advise_snapshot(gb::torch_snapshot_of(trace), "growing", 0,
                                     gb::advise_policies({}), {100 * MiB, 40 * MiB}, 2);
  ASSERT_EQ(a.fit_choice.size(), 2u);
  ASSERT_TRUE(a.fit_choice[0]);
  EXPECT_EQ(*a.fit_choice[0], 0u);  // the defaults: no key set
  EXPECT_EQ(a.recommended, 0u);
  EXPECT_FALSE(a.fit_choice[1]);
  EXPECT_TRUE(a.policies[0].fits[0].fits());
  EXPECT_EQ(a.policies[0].fits[0].peak_reserved, 100 * MiB);  // the cache fills the limit
  EXPECT_EQ(a.policies[0].fits[0].headroom(), 0u);
  const auto& oom = a.policies[0].fits[1].oom;
  ASSERT_TRUE(oom);
  EXPECT_EQ(oom->event, 2u * 10u);  // the alloc of 41 MiB: 42 MiB rounded passes 40 MiB
  EXPECT_EQ(oom->request_bytes, 41 * MiB);
  bool cannot_fit = false;
  for (const auto& t : gb::advice_tables(a))
    for (const auto& n : t.notes)
      cannot_fit = cannot_fit || n == "40 MiB cannot fit: live bytes alone peak at 61 MiB.";
  EXPECT_TRUE(cannot_fit);
  // The defaults reserve 882 MiB without a limit: they fit 100 MiB only as a memory fraction
  // makes them, so the line sets one (a formula: no device memory was given).
  ASSERT_TRUE(a.line_limit);
  EXPECT_EQ(*a.line_limit, 100 * MiB);
  const auto lines = gb::lines_of(a);
  EXPECT_EQ(lines.torch,
            "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:\"$(python -c 'import "
            "torch; print(min(1.0, (104857600 * 10**6 // torch.cuda.mem_get_info()[1] + 2) / "
            "10**6))')\"");
  EXPECT_EQ(lines.gbt, "");
  // With the device's memory, a number; the same advice with a limit the bare peak is under
  // needs none.
  const auto b = gb::advise_snapshot(gb::torch_snapshot_of(trace), "growing", 0,
                                     gb::advise_policies({}, true, GiB), {100 * MiB}, 2, GiB);
  EXPECT_EQ(gb::lines_of(b).torch,
            "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.097658");
  EXPECT_EQ(gb::lines_of(b).gbt, "gbt.use(conf=\"per_process_memory_fraction:0.097658\")");
  const auto c = gb::advise_snapshot(gb::torch_snapshot_of(trace), "growing", 0,
                                     gb::advise_policies({}, true), {2 * GiB}, 2);
  EXPECT_FALSE(c.line_limit);
  EXPECT_EQ(gb::lines_of(c).torch, gb::torch_env_line(""));  // the defaults fit, as they run
}

TEST(Advise, FractionTextSetsTheLimitWithinOnePage) {
  for (const std::size_t memory :
       {80 * GiB, std::size_t{150109880320}, std::size_t{85029158912}, 1000 * MiB}) {
    for (const std::size_t limit : {2 * MiB, 100 * MiB, 8700 * MiB, 9000 * MiB, 40 * GiB}) {
      if (limit >= memory) continue;
      const std::string f = gb::fraction_text(limit, memory);
      const std::size_t set = gb::fraction_limit(std::stod(f), memory);
      EXPECT_GE(set, limit) << f << " of " << memory;
      EXPECT_LT(set, limit + 2 * MiB) << f << " of " << memory;
      EXPECT_LE(f.size(), 8u) << f;
    }
  }
  EXPECT_EQ(gb::fraction_text(100 * MiB, 1000 * MiB), "0.100002");
  EXPECT_EQ(gb::fraction_text(GiB, GiB), "1");
  EXPECT_EQ(gb::fraction_text(2 * GiB, GiB), "1");
}

TEST(Advise, GarbageCollectionIsNeverRecommendedWithoutItsFraction) {
  // Without limits the threshold changes nothing in PyTorch: it is not searched, and no
  // recommendation holds it.
  for (const auto& p : gb::advise_policies({}))
    EXPECT_EQ(p.options.garbage_collection_threshold, 0.0) << p.conf;
  EXPECT_EQ(gb::advise_policies({}, true).size(), 3 * gb::advise_policies({}).size());
  // The committed snapshot: the recommendation, replayed as printed (no fraction), reserves no
  // more than the defaults, and the line is its conf alone.
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto a = gb::advise_snapshot(s, "h200", s.busiest_device(), gb::advise_policies({}), {}, 2);
  const auto& r = a.policies[a.recommended];
  ASSERT_TRUE(r.result && a.policies[0].result);
  EXPECT_EQ(r.conf.find("garbage_collection_threshold"), std::string::npos) << r.conf;
  EXPECT_FALSE(a.line_limit);
  const gb::snapshot_trace t(s, "h200", s.busiest_device());
  EXPECT_LE(
      gb::replay_trace(t.prepared, gb::parse_allocator_options(gb::lines_of(a).conf)).peak_reserved,
      a.policies[0].result->peak_reserved);
  // A collecting policy chosen under a limit carries the limit as a fraction.
  gb::advice g = a;
  g.policies[g.recommended].conf = "garbage_collection_threshold:0.6";
  g.line_limit = 240 * MiB;
  g.device_memory = 80 * GiB;
  EXPECT_EQ(gb::lines_of(g).conf, "garbage_collection_threshold:0.6,per_process_memory_fraction:" +
                                      gb::fraction_text(240 * MiB, 80 * GiB));
}

TEST(Advise, BisectedLimitFitsAndOnePageLessDoesNot) {
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto trace = gb::to_replay_trace(s, s.busiest_device());
  for (const char* conf : {"", "expandable_segments:True", "max_split_size_mb:64"}) {
    const auto o = gb::parse_allocator_options(conf);
    const auto unlimited = gb::replay_trace(trace, o);
    const std::size_t l = gb::smallest_fitting_limit(held(trace), o, unlimited.peak_reserved);
    EXPECT_EQ(l % gb::kAdvicePage, 0u) << conf;
    EXPECT_GE(l, gb::peak_requested(trace)) << conf;
    EXPECT_LE(l, unlimited.peak_reserved + gb::kAdvicePage) << conf;
    EXPECT_TRUE(gb::replay_under_limit(held(trace), o, l).fits()) << conf;
    const auto below = gb::replay_under_limit(held(trace), o, l - gb::kAdvicePage);
    ASSERT_FALSE(below.fits()) << conf;
    EXPECT_GT(below.oom->request_bytes, 0u);
    EXPECT_LE(below.oom->reserved, l - gb::kAdvicePage);
  }
}

/// Two free 12 MiB blocks tie, and the address decides which one a 12 MiB request takes: the
/// rest of a 24 MiB segment (P, then Q and R split it) or the whole 12 MiB segment of T. With
/// ascending addresses the split block is lower: U takes it, so freeing Q leaves 12 MiB free on
/// each side of U, and the 24 MiB request V needs a new segment (24 + 24 MiB once the cache of
/// T's segment is freed: smallest limit 48 MiB). With descending addresses T's segment is lower:
/// U takes it, Q's and R's blocks merge back into 24 MiB, and V reuses them (36 MiB, the live
/// peak).
std::vector<ev> address_tie() {
  return {alloc(1, 24 * MiB), release(1),  // P: a 24 MiB segment, cached
          alloc(2, 12 * MiB),              // Q: its first half
          alloc(3, 12 * MiB),              // R: its second half
          alloc(4, 12 * MiB),              // T: a segment of its own
          release(3),         release(4),  // two free 12 MiB blocks
          alloc(5, 12 * MiB),              // U: the lower address of the two
          release(2),                      // Q
          alloc(6, 24 * MiB)};             // V
}

TEST(Advise, SmallestLimitCoversEveryPlacementOfSegments) {
  const auto trace = address_tie();
  const gb::allocator_options defaults;
  const auto live = gb::peak_requested(trace);
  ASSERT_EQ(live, 36 * MiB);
  EXPECT_EQ(gb::smallest_fitting_limit(held(trace), defaults, 60 * MiB, {}), 48 * MiB);
  EXPECT_EQ(gb::smallest_fitting_limit(held(trace), defaults, 60 * MiB,
                                       {gb::address_order::descending, 0}),
            36 * MiB);
  EXPECT_FALSE(gb::replay_under_limit(held(trace), defaults, 46 * MiB).fits());
  EXPECT_TRUE(
      gb::replay_under_limit(held(trace), defaults, 36 * MiB, {gb::address_order::descending, 0})
          .fits());

  const auto a =
      gb::advise_snapshot(gb::torch_snapshot_of(trace), "tie", 0, gb::advise_policies({}), {}, 2);
  const auto placements = gb::advise_placements();
  ASSERT_EQ(placements.size(), gb::kAdvicePlacements);
  ASSERT_EQ(a.defaults.smallest_by_placement.size(), placements.size());
  EXPECT_EQ(a.defaults.smallest_by_placement[0], 48 * MiB);  // ascending
  EXPECT_EQ(a.defaults.smallest_by_placement[1], 36 * MiB);  // descending
  EXPECT_EQ(a.defaults.smallest_limit, 48 * MiB);            // fits under all of them
  EXPECT_EQ(a.defaults.smallest_low(), 36 * MiB);
  for (const auto& p : placements)
    EXPECT_TRUE(gb::replay_under_limit(held(trace), defaults, a.defaults.smallest_limit, p).fits())
        << p.name();
  ASSERT_FALSE(a.defaults.below.fits());
  EXPECT_EQ(a.defaults.below.limit, 46 * MiB);

  const auto tables = gb::advice_tables(a);
  ASSERT_FALSE(tables.empty());
  const auto& t = tables[0];
  const auto col = std::find_if(t.columns.begin(), t.columns.end(),
                                [](const auto& c) { return c.key == "smallest_by_placement"; });
  ASSERT_NE(col, t.columns.end());
  EXPECT_EQ(std::get<std::string>(t.rows[0][static_cast<std::size_t>(col - t.columns.begin())]),
            "36-48");
  // Under 40 MiB the ascending placement runs out of memory; descending fits, as may others.
  const auto f = gb::advise_snapshot(gb::torch_snapshot_of(trace), "tie", 0,
                                     gb::advise_policies({}), {40 * MiB, 48 * MiB}, 2);
  ASSERT_EQ(f.defaults.fits_in.size(), 2u);
  EXPECT_GE(f.defaults.fits_in[0], 1u);
  EXPECT_LT(f.defaults.fits_in[0], gb::kAdvicePlacements);
  EXPECT_EQ(f.defaults.fits_in[1], gb::kAdvicePlacements);
  const auto ft = gb::advice_tables(f);
  const auto fit = std::find_if(ft.begin(), ft.end(), [](const auto& x) { return x.id == "fit"; });
  ASSERT_NE(fit, ft.end());
  EXPECT_EQ(std::get<std::string>(fit->rows[0][1]),
            fmt::format("OOM at event 9 (fits in {} of 8 placements)", f.defaults.fits_in[0]));
  EXPECT_EQ(std::get<std::string>(fit->rows[1][1]), "fits, 0 B to spare");
  // 48 MiB: the defaults fit under every placement, so they are the simplest that fits.
  ASSERT_EQ(f.fit_choice_everywhere.size(), 2u);
  EXPECT_TRUE(f.fit_choice_everywhere[1]);
  EXPECT_EQ(std::get<std::string>(fit->rows[1][3]), "(defaults)");
  auto contradicts = gb::to_json(f);
  contradicts["defaults"]["fits_in_placements"][1] = 0;  // the ascending replay fits 48 MiB
  try {
    (void)gb::advice_from_json(contradicts, "c.json");
    ADD_FAILURE() << "read";
  } catch (const gb::format_error& e) {
    EXPECT_STREQ(e.what(), "c.json: fits_in_placements disagrees with the policy's fits");
  }
  // Saved and read back, the placements' limits come back in order.
  const nlohmann::json j = gb::to_json(a);
  const auto back = gb::advice_from_json(nlohmann::json::parse(j.dump()), "tie.json");
  EXPECT_EQ(back.defaults.smallest_by_placement, a.defaults.smallest_by_placement);
  // Advice saved before placements were replayed reads as one limit.
  auto old = j;
  old["defaults"].erase("smallest_limit_by_placement");
  old["recommendation"].erase("smallest_limit_by_placement");
  const auto read_old = gb::advice_from_json(old, "old.json");
  EXPECT_TRUE(read_old.defaults.smallest_by_placement.empty());
  EXPECT_EQ(read_old.defaults.smallest_low(), 48 * MiB);
}

TEST(Advise, StrandedPartsSumToReservedLessAllocated) {
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto a =
      gb::advise_snapshot(s, "h200", s.busiest_device(), gb::advise_policies({}), {240 * MiB}, 2);
  for (const auto* d : {&a.defaults, &a.recommendation}) {
    const auto& st = d->stranded;
    EXPECT_GT(st.free_bytes(), 0u);
    EXPECT_EQ(sum_of_parts(st), st.free_bytes());
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::unexplained), 0u);
    const auto k = a.tightest_fit();
    EXPECT_EQ(st.reserved, d == &a.recommendation && a.line_limit && k
                               ? a.policies[d->index].fits[*k].peak_reserved
                               : a.policies[d->index].result->peak_reserved);
  }
  // Mixed traces of many sizes, under policies of every kind.
  const auto mixed = gb::mixed_trace(6000, 3);
  for (const char* conf :
       {"", "expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:4"}) {
    const auto st = gb::stranded_at_peak(held(mixed), gb::parse_allocator_options(conf));
    EXPECT_EQ(sum_of_parts(st), st.free_bytes()) << conf;
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::unexplained), 0u) << conf;
    EXPECT_EQ(st.reserved, gb::replay_trace(mixed, gb::parse_allocator_options(conf)).peak_reserved)
        << conf;
  }
}

TEST(Advise, StrandedCausesByConstruction) {
  const gb::allocator_options defaults;
  {  // a block cached on stream 1 cannot serve stream 2
    const auto st =
        gb::stranded_at_peak(held(std::vector<gb::replay_event>{alloc(1, 30 * MiB, 1), release(1),
                                                                alloc(2, 30 * MiB, 2)}),
                             defaults);
    ASSERT_EQ(st.parts.size(), 1u);
    EXPECT_EQ(st.parts[0].cause, gb::stranded_cause::other_stream);
    EXPECT_EQ(st.parts[0].stream, 1u);
    EXPECT_EQ(st.parts[0].bytes, 30 * MiB);
    EXPECT_EQ(st.stream, 2u);
  }
  {  // max_split_size_mb:64 keeps a free 100 MiB block from a 20 MiB request
    const std::vector<ev> t = {alloc(1, 100 * MiB), release(1), alloc(2, 20 * MiB)};
    const auto st =
        gb::stranded_at_peak(held(t), gb::parse_allocator_options("max_split_size_mb:64"));
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::max_split), 100 * MiB);
    EXPECT_EQ(st.free_bytes(), 100 * MiB);
    // Without it the block is split: the peak is the 100 MiB segment, all of it in use.
    const auto plain = gb::stranded_at_peak(held(t), defaults);
    EXPECT_EQ(plain.reserved, 100 * MiB);
    EXPECT_EQ(plain.event, 0u);
    EXPECT_EQ(plain.free_bytes(), 0u);
  }
  {  // a small block's segment is the other pool; a 5 MiB request takes a 20 MiB segment
    const auto st = gb::stranded_at_peak(
        held(std::vector<gb::replay_event>{alloc(1, 512), alloc(2, 5 * MiB)}), defaults);
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::other_pool), 2 * MiB - 512);
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::segment_rest), 15 * MiB);
    EXPECT_EQ(st.rounding_bytes(), 0u);
  }
  {  // two free 12 MiB holes between live blocks are too small for 14 MiB
    const std::vector<ev> t = {alloc(1, 12 * MiB), alloc(2, 12 * MiB), alloc(3, 12 * MiB),
                               release(1),         release(3),         alloc(4, 14 * MiB)};
    const auto st = gb::stranded_at_peak(held(t), defaults);
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::too_small), 24 * MiB);
    EXPECT_EQ(st.reserved, 50 * MiB);
    EXPECT_EQ(st.allocated, 26 * MiB);
  }
  {  // rounding: 1000 bytes take a 1024-byte block
    const auto st =
        gb::stranded_at_peak(held(std::vector<gb::replay_event>{alloc(1, 1000)}), defaults);
    EXPECT_EQ(st.rounding_bytes(), 24u);
    EXPECT_EQ(st.bytes_of(gb::stranded_cause::segment_rest), 2 * MiB - 1024);
  }
}

TEST(Advise, JsonReadsBackToTheSameTables) {
  const auto a =
      gb::advise_snapshot(gb::torch_snapshot_of(growing_buffer()), "growing", 0,
                          gb::advise_policies({"max_split_size_mb:300"}), {100 * MiB, 40 * MiB}, 2);
  const nlohmann::json j = gb::to_json(a);
  const auto b = gb::advice_from_json(nlohmann::json::parse(j.dump()), "advice.json");
  const auto ta = gb::advice_tables(a);
  const auto tb = gb::advice_tables(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t i = 0; i < ta.size(); ++i)
    EXPECT_EQ(gb::presentation::to_json(ta[i]), gb::presentation::to_json(tb[i])) << ta[i].id;
  EXPECT_EQ(a.policies.back().conf, "max_split_size_mb:300");
  EXPECT_TRUE(gb::report::is_advice(j));
  const std::string html = gb::report::render_advice_html(b);
  EXPECT_NE(html.find("data-chart=\"advice-usage\""), std::string::npos);
  EXPECT_NE(html.find("data-chart=\"advice-stranded\""), std::string::npos);
  EXPECT_EQ(b.recommended, 0u);  // the defaults fit 100 MiB
  ASSERT_TRUE(b.line_limit);     // ... under a fraction: the line carries it
  EXPECT_EQ(b.line_limit, a.line_limit);
  EXPECT_NE(html.find("export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:"),
            std::string::npos);
  EXPECT_NE(html.find("--fit 100 MiB"), std::string::npos);  // the limit's line
}

TEST(Advise, BadAdviceFilesAreOneLineNamingTheFile) {
  const auto a = gb::advise_snapshot(gb::torch_snapshot_of(growing_buffer()), "growing", 0,
                                     gb::advise_policies({}), {}, 1);
  nlohmann::json j = gb::to_json(a);
  const auto message = [](const nlohmann::json& x) {
    try {
      (void)gb::advice_from_json(x, "a.json");
    } catch (const gb::format_error& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  EXPECT_EQ(message(nlohmann::json{{"command", "all"}}),
            "a.json: not an advice file (its \"command\" is not \"advise\")");
  auto no_curve = j;
  no_curve["defaults"].erase("curve");
  EXPECT_EQ(message(no_curve),
            "a.json: not an advice file that can be read: defaults.curve: missing");
  // A value of the wrong kind is named by its key path, as in the lessons' results.
  auto bad_kind = j;
  bad_kind["policies"][3]["keys"] = "two";
  EXPECT_EQ(message(bad_kind),
            "a.json: not an advice file that can be read: policies[3].keys: expected an integer, "
            "got \"two\"");
  auto contradiction = j;
  contradiction["policies"][0]["fits"] = {{{"limit_bytes", 1},
                                           {"fits", false},
                                           {"peak_reserved_bytes", 0},
                                           {"headroom_bytes", 0},
                                           {"oom", nullptr}}};
  contradiction["fit_limits_bytes"] = {1};
  EXPECT_EQ(message(contradiction), "a.json: a fit whose \"fits\" contradicts its \"oom\"");
  auto bad_split = j;
  bad_split["defaults"]["stranded"]["allocated_bytes"] = 1ull << 60;
  EXPECT_EQ(message(bad_split),
            "a.json: stranded bytes where allocated exceeds reserved or requested allocated");
  auto short_fits = j;
  short_fits["fit_limits_bytes"] = {1};
  EXPECT_EQ(message(short_fits), "a.json: a policy whose fits do not match fit_limits_bytes");
  auto above = j;
  above["defaults"]["smallest_limit_by_placement"][1]["bytes"] = 1ull << 40;
  EXPECT_EQ(message(above), "a.json: a placement's smallest limit above smallest_limit_bytes");
  auto renamed = j;
  renamed["defaults"]["smallest_limit_by_placement"][0]["placement"] = "sideways";
  EXPECT_EQ(message(renamed), "a.json: smallest_limit_by_placement names an unknown placement");
  auto counted = j;
  counted["defaults"]["fits_in_placements"] = {9};
  counted["fit_limits_bytes"] = nlohmann::json::array();
  EXPECT_EQ(message(counted),
            "a.json: fits_in_placements counts more placements than were replayed");
  auto mismatched = j;
  mismatched["defaults"]["fits_in_placements"] = {1, 2};
  EXPECT_EQ(message(mismatched), "a.json: fits_in_placements does not match fit_limits_bytes");
  auto few = j;
  few["defaults"]["smallest_limit_by_placement"].erase(7);
  EXPECT_EQ(message(few), "a.json: smallest_limit_by_placement is not a list of the placements");
  auto orphan = j;
  orphan["defaults"].erase("smallest_limit_by_placement");
  orphan["defaults"]["fits_in_placements"] = {1};
  EXPECT_EQ(message(orphan), "a.json: fits_in_placements without smallest_limit_by_placement");
  auto choice = j;
  choice["fit_choice_everywhere"] = {true};
  EXPECT_EQ(message(choice), "a.json: fit_choice_everywhere does not match fit_limits_bytes");
}

TEST(Advise, PoliciesAreSearchedNotListed) {
  const auto p = gb::advise_policies({});
  EXPECT_EQ(p.front().conf, "");
  EXPECT_EQ(p.front().options, gb::allocator_options{});
  EXPECT_EQ(p.size(), 6u * 4u * 2u);
  EXPECT_EQ(gb::advise_confs().size(), p.size());
  EXPECT_EQ(gb::advise_policies({}, true).size(), 6u * 4u * 2u * 3u);
  // Every one distinct, every one parsed once into the options its conf says.
  std::vector<gb::allocator_options> seen;
  for (const auto& c : p) {
    EXPECT_EQ(c.options, gb::parse_allocator_options(c.conf)) << c.conf;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), c.options), 0) << c.conf;
    seen.push_back(c.options);
  }
  // A user's policy already searched is not added twice; a new one is; bad ones are refused.
  EXPECT_EQ(gb::advise_policies({"expandable_segments:True"}).size(), p.size());
  EXPECT_EQ(gb::advise_policies({"max_split_size_mb:300"}).size(), p.size() + 1);
  EXPECT_THROW((void)gb::advise_policies({"bogus_key:1"}), gb::logic_error);
  EXPECT_THROW((void)gb::advise_policies({" "}), gb::logic_error);
  // One list rule, two answers to a repeat: replay refuses it, advise skips it.
  EXPECT_THROW((void)gb::replay_policies({"max_split_size_mb:64"}), gb::logic_error);
  const auto skipped = gb::policy_list({"", "max_split_size_mb:64"},
                                       {"max_split_size_mb:64", "expandable_segments:True"},
                                       gb::repeated_policy::skip);
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_EQ(skipped[2].conf, "expandable_segments:True");
  EXPECT_EQ(gb::policy_label(""), "(defaults)");
}

TEST(Advise, SweepRunsCollectorsOnlyUnderAFraction) {
  // Two buffers of 30 MiB, then one of 50 MiB after both are freed: the defaults cache the
  // 60 MiB and take 50 more (110 MiB at peak). PyTorch collects garbage only under a memory
  // fraction: without one the threshold changes nothing; with one (80 MiB of a 100 MiB device)
  // the cached 60 MiB go back before the 50 MiB segment is taken.
  const held_trace t(std::vector<ev>{alloc(1, 30 * MiB), alloc(2, 30 * MiB), release(1), release(2),
                                     alloc(3, 50 * MiB), release(3)});
  const auto policies =
      gb::policy_list({"", "garbage_collection_threshold:0.6"},
                      {"garbage_collection_threshold:0.6,per_process_memory_fraction:0.8"},
                      gb::repeated_policy::refuse, 100 * MiB);
  ASSERT_EQ(policies.size(), 3u);
  EXPECT_EQ(policies[2].options.reserved_limit, 80 * MiB);
  EXPECT_EQ(policies[1].options.reserved_limit, SIZE_MAX);
  gb::thread_pool pool(2);
  std::vector<int> then_ran(3, 0);
  const auto sw =
      gb::sweep_policies(t, policies, pool, [&](std::size_t i, const gb::policy_run& run) {
        EXPECT_TRUE(run.result.has_value()) << i;
        ++then_ran[i];
      });
  ASSERT_EQ(sw.runs.size(), 3u);
  ASSERT_TRUE(sw.runs[0].result && sw.runs[1].result && sw.runs[2].result);
  EXPECT_EQ(then_ran, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(sw.runs[0].result->peak_reserved, 110 * MiB);
  EXPECT_EQ(sw.runs[1].result->peak_reserved, 110 * MiB);  // no fraction: no collection
  EXPECT_EQ(sw.runs[2].result->peak_reserved, 60 * MiB);   // collected under 80 MiB
  // A fraction without the device's memory is refused, naming what to give.
  try {
    (void)gb::policy_list({""}, {"per_process_memory_fraction:0.5"}, gb::repeated_policy::refuse);
    FAIL() << "a fraction without device memory was accepted";
  } catch (const gb::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("--device-memory"), std::string::npos) << e.what();
  }
}

TEST(Advise, CommandLineRefusesBadInputWithExit2) {
  const auto run = [](std::vector<std::string> args, std::string* err) {
    args.insert(args.begin(), "gpu-basics");
    std::ostringstream o, e;
    const auto r = gb::cli::parse(args, o, e);
    if (!r.opts) {
      *err = e.str();
      return r.exit_code;
    }
    const int code = gb::cli::run(*r.opts, o, e);
    *err = e.str();
    return code;
  };
  const std::string snap = kData + "/snapshot_small.pickle";
  std::string err;
  EXPECT_EQ(run({"advise", snap, "--fit", "lots"}, &err), gb::cli::exit_usage);
  EXPECT_NE(err.find("expected a size such as 24GiB"), std::string::npos) << err;
  EXPECT_EQ(run({"advise", snap, "--fit", "0"}, &err), gb::cli::exit_usage);
  EXPECT_EQ(run({"advise", snap, "--policy", "bogus_key:1"}, &err), gb::cli::exit_usage);
  EXPECT_EQ(err.rfind("gpu-basics: --policy: ", 0), 0u) << err;
  EXPECT_EQ(run({"advise", snap, "--json", snap}, &err), gb::cli::exit_usage);
  EXPECT_NE(err.find("refusing to overwrite an input"), std::string::npos) << err;
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_advise_test";
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "a.json").string();
  EXPECT_EQ(run({"advise", snap, "--json", out, "--html", out}, &err), gb::cli::exit_usage);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(run({"advise", snap, "--json", out, "--fit", "1GiB"}, &err), gb::cli::exit_ok) << err;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["command"], "advise");
  EXPECT_EQ(j["fit_limits_bytes"][0], 1ull << 30);
  std::filesystem::remove_all(dir);
}

#if GPU_BASICS_TEST_HAVE_ZLIB
#include <zlib.h>

#include <random>

#include "gpu_basics/core/gzip.hpp"

namespace {
/// `data` as one gzip member.
std::string gzip_of(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string gunzip_error(const std::string& bytes, std::uint64_t max) {
  try {
    (void)gb::gunzip(bytes, max, "s.pickle.gz");
  } catch (const gb::format_error& e) {
    return e.what();
  }
  return "(read)";
}
}  // namespace

TEST(Gzip, RoundTripsMembersAndRefusesBadData) {
  std::mt19937_64 rng(11);
  std::string data(1 << 20, '\0');
  for (auto& c : data) c = static_cast<char>(rng() % 7);  // compressible, not constant
  const std::string gz = gzip_of(data);
  ASSERT_TRUE(gb::is_gzip(gz));
  EXPECT_FALSE(gb::is_gzip(data));
  EXPECT_EQ(gb::gunzip(gz, 1ull << 30, "s"), data);
  EXPECT_EQ(gb::gunzip(gz + gzip_of("tail"), 1ull << 30, "s"), data + "tail");  // two members
  EXPECT_EQ(gunzip_error(gz.substr(0, gz.size() / 2), 1ull << 30),
            "s.pickle.gz: gzip: truncated (the compressed stream ends early)");
  std::string bad = gz;
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x5a);
  EXPECT_EQ(gunzip_error(bad, 1ull << 30).rfind("s.pickle.gz: gzip: ", 0), 0u);
  EXPECT_EQ(gunzip_error(gz + "junk", 1ull << 30),
            "s.pickle.gz: gzip: data after the end of the compressed stream");
  // 16 MiB of zeros is 16 KiB compressed: refused at the cap, not after filling memory.
  const std::string bomb = gzip_of(std::string(16u << 20, '\0'));
  EXPECT_LT(bomb.size(), 1u << 20);
  EXPECT_EQ(gunzip_error(bomb, 4u << 20),
            "s.pickle.gz: decompresses to more than 4 MiB, the limit for this input (set "
            "GPU_BASICS_MAX_INPUT_MIB to raise it)");
}

TEST(Gzip, ACompressedSnapshotReadsAsThePlainOne) {
  std::ifstream in(kData + "/h200_torch_snapshot.pickle", std::ios::binary);
  const std::string plain((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_gzip_test";
  std::filesystem::create_directories(dir);
  const std::string gz = (dir / "s.pickle.gz").string();
  std::ofstream(gz, std::ios::binary) << gzip_of(plain);
  const auto a = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto b = gb::read_torch_snapshot(gz);
  ASSERT_EQ(a.device_traces.size(), b.device_traces.size());
  const auto ta = gb::to_replay_trace(a, a.busiest_device());
  const auto tb = gb::to_replay_trace(b, b.busiest_device());
  ASSERT_EQ(ta.size(), tb.size());
  EXPECT_EQ(gb::replay_trace(ta, {}).peak_reserved, gb::replay_trace(tb, {}).peak_reserved);
  std::ofstream(gz, std::ios::binary) << gzip_of(plain).substr(0, 1000);  // cut short
  EXPECT_THROW((void)gb::read_torch_snapshot(gz), gb::format_error);
  std::filesystem::remove_all(dir);
}

TEST(Gzip, ABombThatIsNotAPickleStopsAtItsFirstBytes) {
  // 64 MiB of zeros behind a line of text: refused as "not a pickle" from the first inflated
  // bytes, under an input cap (16 MiB) that inflating it whole would have met first.
  const std::string bomb = gzip_of("this is not a pickle\n" + std::string(64 << 20, '\0'));
  int calls = 0;
  std::size_t seen = 0;
  EXPECT_THROW((void)gb::gunzip(bomb, 1ull << 40, "b",
                                [&](std::string_view head) {
                                  ++calls;
                                  seen = head.size();
                                  throw gb::format_error("b: not a pickle");
                                }),
               gb::format_error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, 64u);
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_gzip_bomb";
  std::filesystem::create_directories(dir);
  const std::string gz = (dir / "bomb.pickle.gz").string();
  std::ofstream(gz, std::ios::binary) << bomb;
  ASSERT_EQ(setenv("GPU_BASICS_MAX_INPUT_MIB", "16", 1), 0);
  std::string message;
  try {
    (void)gb::read_torch_snapshot(gz);
  } catch (const gb::format_error& e) {
    message = e.what();
  }
  unsetenv("GPU_BASICS_MAX_INPUT_MIB");
  EXPECT_NE(message.find("not a pickle"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}
#endif

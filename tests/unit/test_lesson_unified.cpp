// Tests of the unified lesson against its H200 fixture (tests/data/h200_unified.json): the result
// survives JSON, every table has a row per measured item, and every note states figures that the
// test computes again from the fixture's own fields (so a new fixture needs no new strings).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "gpu_basics/lessons/unified.hpp"
#include "gpu_basics/report/report.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

const std::string kFixture = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data/h200_unified.json";

struct fixture {
  run_record rec;
  unified_result r;
  device_facts facts;
};

const fixture& loaded() {
  static const fixture f = [] {
    fixture x;
    x.rec = load_record(kFixture);
    for (const auto& [name, j] : x.rec.results)
      if (name == "unified") x.r = result_from_json<unified_result>(j, "unified");
    x.facts = facts_of(x.rec);
    return x;
  }();
  return f;
}

/// The notes under table `id`, one per line.
std::string notes_under(const std::vector<presentation::table>& tables, const std::string& id) {
  std::string out;
  for (const auto& t : tables)
    if (t.id == id)
      for (const auto& n : t.notes) out += n + "\n";
  return out;
}

std::vector<presentation::table> rendered(const unified_result& r, const device_facts& facts) {
  auto tables = present_unified(r, facts);
  attach_notes(tables, explain_unified(r, facts));
  return tables;
}

// The wording of figures, as a reader checks them: decimal GB/s and TB/s, MiB.
std::string rate(double v) {
  return v >= 1e12 ? fmt::format("{:.2f} TB/s", v / 1e12) : fmt::format("{:.1f} GB/s", v / 1e9);
}
std::string mib(double bytes) {
  return fmt::format("{:.0f} MiB", bytes / (1 << 20));
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\nin:\n" << (text)

}  // namespace

TEST(UnifiedFixture, LoadsAndSurvivesJson) {
  const auto& f = loaded();
  ASSERT_TRUE(f.r.managed && f.r.zero_copy && f.r.ledger && f.r.beliefs);
  const nlohmann::json j = f.r;
  EXPECT_EQ(result_from_json<unified_result>(nlohmann::json::parse(j.dump()), "unified"), f.r);
  EXPECT_EQ(f.rec.command, "unified");
}

TEST(UnifiedFixture, OlderResultsWithoutTheLessonStillLoadAndRender) {
  const run_record old =
      load_record(std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data/h200_all.json");
  for (const auto& rep : render(old)) EXPECT_NE(rep.lesson, "unified");
  const auto empty = result_from_json<unified_result>(nlohmann::json::object(), "unified");
  EXPECT_EQ(empty, unified_result{});
  EXPECT_TRUE(present_unified(empty, loaded().facts).empty());
  EXPECT_TRUE(explain_unified(empty, loaded().facts).empty());
}

TEST(UnifiedFixture, EveryTableHasARowPerMeasuredItem) {
  const auto& f = loaded();
  const auto tables = present_unified(f.r, f.facts);
  std::vector<std::string> ids;
  for (const auto& t : tables) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"managed", "oversubscription", "zero_copy",
                                           "host_access", "ledger", "beliefs", "d2d_sweep"}));
  const auto rows = [&](const std::string& id) {
    for (const auto& t : tables)
      if (t.id == id) return t.rows.size();
    return std::size_t{0};
  };
  EXPECT_EQ(rows("managed"), f.r.managed->touches.size());
  EXPECT_EQ(rows("oversubscription"), f.r.managed->oversubscription->points.size());
  EXPECT_EQ(rows("zero_copy"), f.r.zero_copy->rows.size());
  EXPECT_EQ(rows("host_access"), 5u);
  EXPECT_EQ(rows("ledger"), f.r.ledger->probes.front().steps.size());
  EXPECT_EQ(rows("beliefs"), 5u);
  EXPECT_EQ(rows("d2d_sweep"), f.r.beliefs->d2d->points.size());
  for (const auto& t : rendered(f.r, f.facts)) EXPECT_FALSE(t.notes.empty()) << t.id;
}

TEST(UnifiedNotes, ManagedStatesTheRatesAndTheSpeedupOfPrefetch) {
  const auto& f = loaded();
  const auto& m = *f.r.managed;
  const std::string n = notes_under(rendered(f.r, f.facts), "managed");
  const auto* faults = find_touch(m, "to_gpu", "faults");
  const auto* prefetch = find_touch(m, "to_gpu", "prefetch");
  ASSERT_TRUE(faults && prefetch);
  EXPECT_HAS(n, rate(faults->bytes_per_s));
  EXPECT_HAS(n, rate(prefetch->bytes_per_s));
  EXPECT_HAS(n, fmt::format("{:.1f}x faster", faults->seconds / prefetch->seconds));
  for (const char* p : {"read_mostly", "preferred_location", "accessed_by"})
    EXPECT_HAS(n, rate(find_touch(m, "to_gpu", p)->bytes_per_s));
  EXPECT_HAS(n, rate(find_touch(m, "to_cpu", "faults")->bytes_per_s));
  EXPECT_HAS(n, rate(find_touch(m, "to_cpu", "prefetch")->bytes_per_s));
  if (f.facts.link_bytes_per_s) {
    EXPECT_HAS(n, fmt::format("{:.0f}%", 100 * prefetch->bytes_per_s / *f.facts.link_bytes_per_s));
  }
  EXPECT_HAS(n, m.fault_counter);  // counted or not, the note says how
}

TEST(UnifiedNotes, OversubscriptionStatesTheCollapseAndWhatPrefetchChanges) {
  const auto& f = loaded();
  const auto& o = *f.r.managed->oversubscription;
  const std::string n = notes_under(rendered(f.r, f.facts), "oversubscription");
  EXPECT_HAS(n, o.mode == "ballast" ? std::string("ballast") : std::string("No ballast"));
  const oversubscription_point *fit = nullptr, *over = nullptr;
  for (const auto& p : o.points) {
    if (p.ratio <= 1 && (!fit || p.ratio > fit->ratio)) fit = &p;
    if (p.ratio > 1 && (!over || p.ratio < over->ratio)) over = &p;
  }
  ASSERT_TRUE(fit && over);
  EXPECT_HAS(n, rate(fit->faults_bytes_per_s));
  EXPECT_HAS(n, rate(over->faults_bytes_per_s));
  EXPECT_HAS(n, fmt::format("{:.0f}x slower", fit->faults_bytes_per_s / over->faults_bytes_per_s));
  EXPECT_HAS(n, rate(over->prefetch_bytes_per_s));
  EXPECT_HAS(n, fmt::format("({:.1f}x)", over->prefetch_bytes_per_s / over->faults_bytes_per_s));
  EXPECT_HAS(n, format_bytes(o.free_bytes));
}

TEST(UnifiedNotes, ZeroCopyStatesTheCrossover) {
  const auto& f = loaded();
  const auto& z = *f.r.zero_copy;
  const std::string n = notes_under(rendered(f.r, f.facts), "zero_copy");
  const auto* one = find_access(z, "one_pass");
  const auto* many = find_access(z, "passes");
  const auto* sparse = find_access(z, "sparse");
  ASSERT_TRUE(one && many && sparse);
  EXPECT_HAS(n, rate(static_cast<double>(one->bytes_read) / one->mapped_s));
  // Each access names the side that won and what it beat: "faster than the copy" where mapped
  // won, "faster than mapped" where the bulk copy did; never a bare "slower".
  const auto lead = [](const zero_copy_row& r) {
    return r.mapped_s < r.copy_then_compute_s
               ? fmt::format("{:.1f}x faster than the copy", r.copy_then_compute_s / r.mapped_s)
               : fmt::format("{:.1f}x faster than mapped", r.mapped_s / r.copy_then_compute_s);
  };
  for (const auto* r : {one, many, sparse}) EXPECT_HAS(n, lead(*r));
  EXPECT_EQ(n.find("x slower"), std::string::npos) << n;
  EXPECT_HAS(n, fmt::format("{} passes", many->passes));
  // Each access is listed under the side that won it.
  const auto crossover = n.substr(n.find("The crossover"));
  const auto copy_part = crossover.find("the bulk copy for");
  ASSERT_NE(copy_part, std::string::npos);
  EXPECT_EQ(crossover.find("sparse (") < copy_part, sparse->mapped_s < sparse->copy_then_compute_s);
  EXPECT_EQ(crossover.find(fmt::format("{} passes (", many->passes)) < copy_part,
            many->mapped_s < many->copy_then_compute_s);
  const std::string h = notes_under(rendered(f.r, f.facts), "host_access");
  EXPECT_HAS(h, z.support.pageable_memory_access ? "reads pageable host memory directly"
                                                 : "No HMM or ATS here");
}

TEST(UnifiedNotes, LedgerSplitsWhatTheProcessHolds) {
  const auto& f = loaded();
  const auto tables = rendered(f.r, f.facts);
  const std::string n = notes_under(tables, "ledger");
  const ledger_probe* lazy = find_probe(*f.r.ledger, "LAZY");
  const ledger_probe* eager = find_probe(*f.r.ledger, "EAGER");
  ASSERT_TRUE(lazy && eager);
  const auto used = [](const ledger_probe& p, const std::string& step) {
    for (std::size_t i = 1; i < p.steps.size(); ++i)
      if (p.steps[i].step == step)
        return static_cast<double>(p.steps[i].used_bytes) -
               static_cast<double>(p.steps[i - 1].used_bytes);
    return 0.0;
  };
  const double ctx = used(*lazy, "context");
  EXPECT_HAS(n, "context alone took " + mib(ctx));
  // EAGER against LAZY: the note names every step whose figures differ in the table, with the
  // table's own figures, and no step whose figures agree.
  const auto& t = *std::find_if(tables.begin(), tables.end(),
                                [](const presentation::table& x) { return x.id == "ledger"; });
  const auto col = [&](const std::string& key) {
    for (std::size_t i = 0; i < t.columns.size(); ++i)
      if (t.columns[i].key == key) return i;
    ADD_FAILURE() << "no column " << key;
    return std::size_t{0};
  };
  const std::size_t lazy_col = col("delta_LAZY"), eager_col = col("delta_EAGER");
  int differing = 0;
  for (const auto& row : t.rows) {
    const auto l = presentation::render_cell(row[lazy_col], t.columns[lazy_col]);
    const auto e = presentation::render_cell(row[eager_col], t.columns[eager_col]);
    const auto label = std::get<std::string>(row[0]);
    if (l == "n/a" || l == e) {
      EXPECT_EQ(n.find(label + ", "), std::string::npos) << label << "\n" << n;
      continue;
    }
    ++differing;
    const long diff = std::stol(e) - std::stol(l);
    EXPECT_HAS(n, fmt::format("{}, {} MiB against {} MiB ({} MiB {})", label, e, l, std::labs(diff),
                              diff >= 0 ? "more" : "less"));
  }
  EXPECT_GT(differing, 0);  // the fixture's EAGER run loads cuBLASLt's kernels up front
  EXPECT_EQ(n.find("(0 MiB more)"), std::string::npos) << n;
  const double total = static_cast<double>(lazy->steps.back().used_bytes) -
                       static_cast<double>(lazy->steps.front().used_bytes);
  EXPECT_HAS(n, "this process held " + mib(total));
  EXPECT_HAS(n, mib(static_cast<double>(lazy->allocator_reserved_bytes)) + " reserved");
  EXPECT_HAS(n, mib(static_cast<double>(lazy->allocator_allocated_bytes)) + " allocated");
  const double other = total - ctx - used(*lazy, "first_kernel") - used(*lazy, "cublaslt_handle") -
                       used(*lazy, "first_gemm") -
                       static_cast<double>(lazy->allocator_reserved_bytes) -
                       used(*lazy, "first_allocation");
  EXPECT_HAS(n, "Unattributed after those: " + mib(other));
}

TEST(UnifiedNotes, OversubscriptionSaysSoWhenPrefetchDidNotHelp) {
  unified_result r = loaded().r;
  for (auto& p : r.managed->oversubscription->points)
    if (p.ratio > 1) p.prefetch_bytes_per_s = p.faults_bytes_per_s / 2;
  const std::string n = notes_under(rendered(r, loaded().facts), "oversubscription");
  EXPECT_HAS(n, "Here it did not help");
  EXPECT_EQ(n.find("softens"), std::string::npos) << n;
}

TEST(UnifiedNotes, LedgerWithoutAChildSaysWhy) {
  unified_result r;
  r.ledger = ledger_result{"unavailable: no executable", {}};
  const auto tables = rendered(r, loaded().facts);
  const std::string n = notes_under(tables, "ledger");
  EXPECT_HAS(n, "not measured: unavailable: no executable");
  ASSERT_EQ(tables.size(), 1u);
  ASSERT_EQ(tables[0].rows.size(), 1u);  // the row says why
  EXPECT_EQ(std::get<std::string>(tables[0].rows[0][0]), "unavailable: no executable");
}

TEST(UnifiedNotes, BeliefsStateTheirFiguresAndTheCourseFiguresThatDiffer) {
  const auto& f = loaded();
  const auto& b = *f.r.beliefs;
  const auto tables = rendered(f.r, f.facts);
  const std::string n = notes_under(tables, "beliefs");
  EXPECT_HAS(n, fmt::format("{:.1f}x", b.pin->pin_then_copy_once_s / b.pin->pageable_copy_s));
  EXPECT_HAS(n, fmt::format("{:.0f}% of the destination was still stale",
                            100.0 * static_cast<double>(b.stale_read->wrong_before_sync) /
                                static_cast<double>(b.stale_read->bytes)));
  EXPECT_HAS(n, fmt::format("after the event {} bytes", b.stale_read->wrong_after_sync));
  const std::string d2d = notes_under(tables, "d2d_sweep");
  // The HBM plateau: the median rate of working sets of at least 4 x L2.
  std::vector<double> hbm;
  for (const auto& p : b.d2d->points)
    if (static_cast<double>(p.working_set_bytes) >= 4.0 * static_cast<double>(b.d2d->l2_bytes))
      hbm.push_back(p.bytes_per_s);
  ASSERT_FALSE(hbm.empty());
  std::sort(hbm.begin(), hbm.end());
  const double plateau =
      hbm.size() % 2 ? hbm[hbm.size() / 2] : (hbm[hbm.size() / 2 - 1] + hbm[hbm.size() / 2]) / 2;
  EXPECT_HAS(d2d, rate(2 * plateau) + " read + write");
  EXPECT_HAS(d2d, "HBM at 3.35 TB/s");
  if (f.facts.datasheet) {
    EXPECT_HAS(d2d, fmt::format("{:.0f}% of this GPU's datasheet",
                                100 * 2 * plateau / f.facts.datasheet->hbm_bytes_per_s));
  }
  EXPECT_HAS(d2d, fmt::format("({:.1f} MB)", static_cast<double>(b.d2d->l2_bytes) / 1e6));

  // The table's "what we measured" column carries each belief's own figures.
  std::string measured;
  for (const auto& t : tables)
    if (t.id == "beliefs")
      for (const auto& row : t.rows) measured += std::get<std::string>(row[1]) + "\n";
  EXPECT_HAS(measured,
             fmt::format("{} of {} bytes", b.stale_read->wrong_before_sync, b.stale_read->bytes));
  for (const auto& row : b.pool->rows)
    EXPECT_HAS(measured, format_bytes(row.reserved_after_sync_bytes) + " kept");
  EXPECT_HAS(measured, fmt::format("{:.0f}% utilisation", b.nvml_util->idle_memory_util_percent));
  EXPECT_HAS(measured, fmt::format("{:.0f}%", b.nvml_util->busy_memory_util_percent));
}

TEST(UnifiedNotes, WithoutNvmlTheUtilisationBeliefSaysSo) {
  unified_result r = loaded().r;
  r.beliefs->nvml_util.reset();
  const std::string n = notes_under(rendered(r, loaded().facts), "beliefs");
  EXPECT_HAS(n, "NVML is unavailable");
}

TEST(UnifiedLesson, IsRegisteredAndRendersTheFixture) {
  const lesson* l = find_lesson("unified");
  ASSERT_NE(l, nullptr);
  EXPECT_TRUE(l->in_all);
  const auto rep = l->render(nlohmann::json(loaded().r), loaded().facts);
  EXPECT_EQ(rep.lesson, "unified");
  EXPECT_EQ(rep.tables.size(), 7u);
}

TEST(UnifiedReport, DrawsAChartForEachPart) {
  const std::string html = report::render_html({{"h200", load_record(kFixture)}});
  for (const char* id : {"unified-managed", "unified-oversubscription", "unified-zero-copy",
                         "unified-ledger", "unified-d2d"})
    EXPECT_HAS(html, std::string("\"") + id + "\"");
}

TEST(UnifiedConfig, KeysAreReadCheckedAndErrorsCarryTheirPlace) {
  const config c = parse_config(
      "unified:\n  oversubscription:\n    ratios: [0.5, 2]\n    whole_device: true\n", "t.yaml");
  EXPECT_EQ(c.unified.oversubscription.ratios, (std::vector<double>{0.5, 2}));
  EXPECT_TRUE(c.unified.oversubscription.whole_device);
  try {
    (void)parse_config("unified:\n  oversubscription:\n    ratios: [0.5, 9]\n", "t.yaml");
    ADD_FAILURE() << "a ratio of 9 was accepted";
  } catch (const config_error& e) {
    EXPECT_HAS(std::string(e.what()), "t.yaml:3:");
    EXPECT_HAS(std::string(e.what()), "expected a ratio in 0.05..4, got 9");
  }
  config bad = parse_config("unified:\n  zero_copy:\n    passes: 1\n", "t.yaml");
  try {
    validate(bad);
    ADD_FAILURE() << "1 pass was accepted";
  } catch (const config_error& e) {
    EXPECT_HAS(std::string(e.what()), "t.yaml:3:");
    EXPECT_HAS(std::string(e.what()), "unified.zero_copy.passes");
  }
  const config d = load_config("");
  EXPECT_EQ(d.unified.oversubscription.free_bytes, 2ull << 30);
  EXPECT_FALSE(d.unified.oversubscription.whole_device);
  EXPECT_EQ(d.unified.beliefs.idle_allocation_bytes, 100ull << 30);
}

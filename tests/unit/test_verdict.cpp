// Verdicts on the CPU: `check` judged from the committed H200 run and from fixtures derived from
// it in code (each changes one thing), `compare` of runs and its rule, the fleet view, and bad
// input; the conventions the commands' texts share (a D2D rate says read + write or copied, and
// is one figure in check, fleet and the lesson; check's footer says what its rows say).
// Expectations come from the file and the thresholds, not from fixed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/verdict/compare.hpp"
#include "gpu_basics/verdict/fleet.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "run.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;
using nlohmann::json;

namespace {

using gpu_basics::testing::kData;

json base_json() {
  static const json j = [] {
    std::ifstream in(kData + "h200_all.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }();
  return j;
}

run_record record_of(const json& j) {
  return parse_record(j, "fixture");
}

check_thresholds defaults() {
  return thresholds_of(load_config(""));
}

check_item item(const std::vector<check_item>& items, const std::string& id) {
  for (const auto& i : items)
    if (i.id == id) return i;
  throw std::runtime_error("no item " + id);
}
check_item item(const check_result& c, const std::string& id) {
  return item(c.items, id);
}

/// Scales a rate figure as a run `f` times as fast would have measured it: its summary and, the
/// other way, the per-sample times kept beside it (the gate rule reads the samples).
void scale_rate(json& parent, const char* key, double f) {
  for (const char* k : {"median", "mean", "min", "max", "p25", "p75", "iqr", "stdev"})
    if (parent[key].contains(k)) parent[key][k] = parent[key][k].get<double>() * f;
  if (parent.contains("seconds"))
    for (auto& s : parent["seconds"]) s = s.get<double>() / f;
}

/// Scales every pinned host copy's bandwidth in direction `dir`.
void scale_pinned(json& j, const std::string& dir, double f) {
  for (auto& s : j["results"]["transfer"]["shapes"])
    for (auto& c : s["copies"])
      if (c["memory"] == "pinned" && c["direction"] == dir)
        scale_rate(c, "bandwidth_bytes_per_s", f);
}
void scale_d2d(json& j, double f) {
  for (auto& c : j["results"]["transfer"]["d2d"]) scale_rate(c, "bandwidth_bytes_per_s", f);
}
void scale_gemm(json& j, double f) {
  for (auto& r : j["results"]["profile"]["matmul"]["runs"]) scale_rate(r, "flops_per_s", f);
}
void set_link(json& j, unsigned gen, unsigned width) {
  for (auto* gpus : {&j["environment"]["gpus"], &j["results"]["info"]["gpus"]})
    for (auto& g : *gpus) {
      g["pcie_generation_current"] = gen;
      g["pcie_width_current"] = width;
    }
}

/// The pinned H2D fraction of the link in the committed run.
double h2d_fraction(const json& j) {
  const auto c = verdict::check_of(record_of(j), defaults());
  return *item(c, "h2d").measured;
}

/// Fixtures: each changes one thing of the committed run.
json slower_link() {
  json j = base_json();
  scale_pinned(j, "H2D", 0.6);
  scale_pinned(j, "D2H", 0.6);
  return j;
}
json gen4_x8() {
  json j = base_json();
  set_link(j, 4, 8);
  return j;
}
json lower_gemm() {
  json j = base_json();
  scale_gemm(j, 0.7);
  return j;
}
json failed_verification() {
  json j = base_json();
  j["errors"]["transfer"] = "verification failed: H2D pinned 256 MiB: byte 12 differs";
  return j;
}
json other_gpu() {
  json j = base_json();
  for (auto* gpus : {&j["environment"]["gpus"], &j["results"]["info"]["gpus"]})
    for (auto& g : *gpus) g["name"] = "NVIDIA H100 80GB HBM3";
  return j;
}
/// A check run of the committed figures whose NVML reports an uncorrectable ECC error.
json ecc_error() {
  check_result c = verdict::check_of(record_of(base_json()), defaults());
  c.health.ecc_status = "ok";
  c.health.ecc_uncorrected_volatile = 2;
  c.health.ecc_uncorrected_aggregate = 2;
  c.items = evaluate_check(c);
  run_record r;
  r.command = "check";
  r.environment = base_json()["environment"];
  r.results.emplace_back("check", json(c));
  return to_json(r, render(r));
}

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("gb_verdict_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const json& j) const {
    const auto p = (path_ / name).string();
    std::ofstream(p) << j.dump();
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct cli_result {
  int code;
  std::string out, err;
};
cli_result run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gpu-basics");
  std::ostringstream o, e;
  const auto p = cli::parse(args, o, e);
  if (!p.opts) return {p.exit_code, o.str(), e.str()};
  const int code = cli::run(*p.opts, o, e);
  return {code, o.str(), e.str()};
}

}  // namespace

// ---- check -------------------------------------------------------------------------------------

TEST(Check, TheCommittedH200RunPasses) {
  const auto c = verdict::check_of(record_of(base_json()), defaults());
  for (const char* id :
       {"pcie_link", "h2d", "d2h", "bidirectional", "d2d", "gemm", "verification", "nvml"})
    EXPECT_EQ(item(c, id).status, "PASS") << id << ": " << item(c, id).value;
  // An `all` run did not read NVML's health: skipped, which is not a failure.
  for (const char* id : {"ecc", "retired_pages", "remapped_rows", "idle_throttle"})
    EXPECT_EQ(item(c, id).status, "SKIP") << id;
  EXPECT_EQ(overall_status(c.items), "PASS");
  // The figures come from the file: H2D over the link rate it saved.
  const json base = base_json();
  const auto& t = base["results"]["transfer"];
  EXPECT_NEAR(*item(c, "h2d").measured,
              c.h2d->bandwidth_bytes_per_s.median / t["link_bytes_per_s"].get<double>(), 1e-12);
  EXPECT_EQ(c.h2d->bytes, t["shapes"].back()["bytes"].get<std::uint64_t>());
}

TEST(Check, EachFixtureGetsItsVerdictAndHint) {
  struct expect {
    const char* what;
    json fixture;
    const char* id;
    const char* hint;
  };
  const std::vector<expect> cases = {
      {"slower link", slower_link(), "h2d", "NUMA"},
      {"Gen4 x8", gen4_x8(), "pcie_link",
       "link trained at Gen4 x8 (max Gen5 x16): reseat the card or check the BIOS slot settings"},
      {"lower GEMM", lower_gemm(), "gemm", "tensor cores run slow"},
      {"failed verification", failed_verification(), "verification", "did not match"},
      {"ECC error", ecc_error(), "ecc", "uncorrectable ECC error(s)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto r = verdict::check_of(record_of(c.fixture), defaults());
    EXPECT_EQ(item(r, c.id).status, "FAIL");
    EXPECT_NE(item(r, c.id).hint.find(c.hint), std::string::npos) << item(r, c.id).hint;
    EXPECT_EQ(overall_status(r.items), "FAIL");
    // Only the changed check fails (the slower link slows both directions).
    for (const auto& i : r.items) {
      if (i.id != c.id && !(std::string(c.id) == "h2d" && i.id == "d2h")) {
        EXPECT_NE(i.status, "FAIL") << i.id;
      }
    }
  }
}

TEST(Check, ExitCodesFromSavedRuns) {
  TempDir d;
  const auto base = d.write("base.json", base_json());
  EXPECT_EQ(run_cli({"check", "--from", base}).code, cli::exit_ok);
  for (const auto& [name, fixture] :
       std::vector<std::pair<std::string, json>>{{"slow", slower_link()},
                                                 {"gen4", gen4_x8()},
                                                 {"gemm", lower_gemm()},
                                                 {"verify", failed_verification()},
                                                 {"ecc", ecc_error()}}) {
    const auto r = run_cli({"check", "--from", d.write(name + ".json", fixture)});
    EXPECT_EQ(r.code, cli::exit_check_failed) << name;
    EXPECT_EQ(r.err.rfind("gpu-basics: check failed: ", 0), 0u) << r.err;
    EXPECT_NE(r.out.find("FAIL"), std::string::npos) << name;
  }
  // A threshold the H200 cannot reach fails with one line naming the check.
  const auto strict = run_cli({"check", "--from", base, "--set", "check.h2d_fraction=0.99"});
  EXPECT_EQ(strict.code, cli::exit_check_failed);
  EXPECT_NE(strict.err.find("pinned H2D"), std::string::npos) << strict.err;
  EXPECT_EQ(std::count(strict.err.begin(), strict.err.end(), '\n'), 1);
}

TEST(Check, WarnExitsZeroUnlessStrict) {
  TempDir d;
  // Put H2D just above its threshold, inside the warn band.
  const double t = defaults().h2d_fraction, m = defaults().warn_margin;
  json j = base_json();
  scale_pinned(j, "H2D", (t + m / 2) / h2d_fraction(j));
  const auto path = d.write("warn.json", j);
  const auto c = verdict::check_of(record_of(j), defaults());
  EXPECT_EQ(item(c, "h2d").status, "WARN");
  EXPECT_EQ(run_cli({"check", "--from", path}).code, cli::exit_ok);
  EXPECT_EQ(run_cli({"check", "--from", path, "--strict"}).code, cli::exit_check_failed);
}

TEST(Check, LinkReadLowAtIdleButFastCopiesOnlyWarns) {
  json j = base_json();
  set_link(j, 1, 16);  // generation dropped for power saving, width intact
  const auto c = verdict::check_of(record_of(j), defaults());
  EXPECT_EQ(item(c, "pcie_link").status, "WARN");
}

TEST(Check, ThrottleAndRemapRules) {
  check_result c = verdict::check_of(record_of(base_json()), defaults());
  c.health.throttle_status = "ok";
  c.health.idle_clock_event_reasons = 0x1;  // GPU idle: expected
  EXPECT_EQ(item(evaluate_check(c), "idle_throttle").status, "PASS");
  c.health.idle_clock_event_reasons = 0x1 | 0x40;
  const auto items = evaluate_check(c);
  check_result w;
  w.items = items;
  EXPECT_EQ(item(w, "idle_throttle").status, "FAIL");
  EXPECT_NE(item(w, "idle_throttle").hint.find("HW thermal"), std::string::npos);
  c.health.remap_status = "ok";
  c.health.remap_failure = false;
  c.health.remap_pending = true;
  w.items = evaluate_check(c);
  EXPECT_EQ(item(w, "remapped_rows").status, "WARN");
  c.health.remap_failure = true;
  w.items = evaluate_check(c);
  EXPECT_EQ(item(w, "remapped_rows").status, "FAIL");
  c.health.remap_status = "not supported";
  w.items = evaluate_check(c);
  EXPECT_EQ(item(w, "remapped_rows").status, "SKIP");
}

TEST(Check, ShowRendersASavedCheckAgain) {
  TempDir d;
  const auto path = d.write("ecc.json", ecc_error());
  const auto r = run_cli({"show", path});
  EXPECT_EQ(r.code, cli::exit_ok) << r.err;
  EXPECT_NE(r.out.find("uncorrectable ECC errors"), std::string::npos);
  EXPECT_NE(r.out.find("Verdict: FAIL"), std::string::npos);
}

TEST(Check, ThresholdKeysAreValidated) {
  for (const char* bad :
       {"check.h2d_fraction=0", "check.d2d_fraction=1.5", "check.gemm_fraction=abc",
        "check.warn_margin=0.6", "check.copy_bytes=1", "check.gemm_size=100"}) {
    EXPECT_THROW((void)load_config("", {bad}), config_error) << bad;
  }
  EXPECT_EQ(load_config("", {"check.h2d_fraction=1"}).check.h2d_fraction, 1.0);
}

// ---- compare -----------------------------------------------------------------------------------

TEST(Compare, TheRule) {
  using verdict::change;
  EXPECT_EQ(verdict::judge(100, 0.001, 101, 0.001, true, 0.02).verdict, change::same);
  EXPECT_EQ(verdict::judge(100, 0.001, 97, 0.001, true, 0.02).verdict, change::worse);
  EXPECT_EQ(verdict::judge(100, 0.001, 97, 0.001, false, 0.02).verdict, change::better);
  // Noise wider than the threshold widens "same".
  EXPECT_EQ(verdict::judge(100, 0.05, 96, 0.01, true, 0.02).verdict, change::same);
  EXPECT_EQ(verdict::judge(100, 0.01, 96, 0.05, true, 0.02).verdict, change::same);
  EXPECT_EQ(verdict::judge(100, 0.0, 110, 0.0, false, 0.02).verdict, change::worse);
  EXPECT_THROW((void)verdict::judge(0, 0, 1, 0, true, 0.02), logic_error);
}

TEST(Compare, FiguresCoverEveryKind) {
  const auto f = verdict::figures_of(record_of(base_json()));
  const auto has = [&](const std::string& part) {
    return std::any_of(f.begin(), f.end(),
                       [&](const auto& x) { return x.id.find(part) != std::string::npos; });
  };
  for (const char* part :
       {"copies[H2D pinned 256 MiB].bandwidth_bytes_per_s", "flops_per_s", "cuda_malloc_s",
        "cached_pair_s", "total_s", "fragmentation", "alg_bytes_per_s", "events_s"})
    EXPECT_TRUE(has(part)) << part;
  for (const char* part : {".seconds", "start_s", "series", "link_bytes_per_s"})
    EXPECT_FALSE(has(part)) << part;
  std::set<std::string> ids;
  for (const auto& x : f) EXPECT_TRUE(ids.insert(x.id).second) << "duplicate " << x.id;
}

TEST(Compare, ARunAgainstItselfIsTheSameEverywhere) {
  const auto r = record_of(base_json());
  const auto c = verdict::compare(r, r, 0.02);
  EXPECT_GT(c.rows.size(), 50u);
  EXPECT_EQ(c.count(verdict::change::same), c.rows.size());
  TempDir d;
  const auto p = d.write("a.json", base_json());
  EXPECT_EQ(run_cli({"compare", p, p}).code, cli::exit_ok);
}

TEST(Compare, WorseFiguresComeFirstAndExitNonZero) {
  TempDir d;
  const auto base = d.write("base.json", base_json());
  const auto slow = d.write("slow.json", slower_link());
  const auto c = verdict::compare(record_of(base_json()), record_of(slower_link()), 0.02);
  ASSERT_FALSE(c.rows.empty());
  EXPECT_EQ(c.rows.front().j.verdict, verdict::change::worse);
  EXPECT_NEAR(c.rows.front().j.delta, -0.4, 1e-9);
  EXPECT_EQ(c.count(verdict::change::better), 0u);
  const auto r = run_cli({"compare", base, slow, "--json", d.path("cmp.json")});
  EXPECT_EQ(r.code, cli::exit_worse);
  std::ifstream in(d.path("cmp.json"));
  const json j = json::parse(in);
  EXPECT_EQ(j["figures"][0]["verdict"], "worse");
  EXPECT_EQ(j["worse"].get<int>(), static_cast<int>(c.count(verdict::change::worse)));
  // The other way round it is better, and nothing is worse.
  EXPECT_EQ(run_cli({"compare", slow, base}).code, cli::exit_ok);
}

TEST(Compare, RefusesOtherGpusUnlessForced) {
  TempDir d;
  const auto base = d.write("base.json", base_json());
  const auto other = d.write("h100.json", other_gpu());
  const auto r = run_cli({"compare", base, other});
  EXPECT_EQ(r.code, cli::exit_usage);
  EXPECT_NE(r.err.find("different GPU models"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos);
  EXPECT_EQ(run_cli({"compare", base, other, "--force"}).code, cli::exit_ok);
  json drv = base_json();
  for (auto& g : drv["environment"]["gpus"]) g["driver_version"] = "570.86.10";
  const auto r2 = run_cli({"compare", base, d.write("drv.json", drv)});
  EXPECT_EQ(r2.code, cli::exit_usage);
  EXPECT_NE(r2.err.find("driver major"), std::string::npos) << r2.err;
}

TEST(Compare, BadInputIsOneLineAndExitTwo) {
  TempDir d;
  const auto base = d.write("base.json", base_json());
  json transfer_only = base_json();
  transfer_only["command"] = "transfer";
  for (const char* k : {"info", "memory", "profile"}) transfer_only["results"].erase(k);
  transfer_only["tables"] = json::array();
  const std::vector<std::vector<std::string>> cases = {
      {"compare", base, d.path("missing.json")},
      {"compare", base, std::string(GPU_BASICS_SOURCE_DIR) + "/CMakePresets.json"},
      {"compare", base, d.write("transfer.json", transfer_only)},
      {"compare", kData + "h200_all_v1.json", base},
      {"compare", base},
      {"compare", "--fleet"},
      {"compare", "--fleet", d.path("missing.json")},
      {"check", "--from", d.path("missing.json")},
      {"check", "--from", base, "--baseline", base},  // an `all` run is no check baseline
  };
  for (const auto& args : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, cli::exit_usage) << args.back() << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("gpu-basics: ", 0), 0u) << r.err;
  }
  EXPECT_THROW((void)verdict::analyze_fleet({}), format_error);
}

TEST(Compare, CheckWithABaselineAddsItsVerdicts) {
  TempDir d;
  const auto base_check = d.path("base_check.json");
  ASSERT_EQ(
      run_cli({"check", "--from", d.write("all.json", base_json()), "--json", base_check}).code,
      cli::exit_ok);
  const auto same = run_cli(
      {"check", "--from", d.write("all2.json", base_json()), "--baseline", base_check, "--strict"});
  EXPECT_EQ(same.code, cli::exit_ok) << same.err;
  EXPECT_NE(same.out.find("vs baseline"), std::string::npos);
  // A slower (but passing) node warns against its baseline.
  json j = base_json();
  scale_pinned(j, "D2H", 0.95);
  const auto slower = d.write("slower.json", j);
  const auto r = run_cli({"check", "--from", slower, "--baseline", base_check});
  EXPECT_EQ(r.code, cli::exit_ok);
  EXPECT_NE(r.out.find("worse"), std::string::npos);
  EXPECT_EQ(run_cli({"check", "--from", slower, "--baseline", base_check, "--strict"}).code,
            cli::exit_check_failed);
}

// ---- fleet -------------------------------------------------------------------------------------

TEST(Fleet, MedianAndMad) {
  const auto mm = verdict::median_mad({1, 2, 3, 4, 100});
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->first, 3);
  EXPECT_EQ(mm->second, 1);
  EXPECT_FALSE(verdict::median_mad({}));
}

TEST(Fleet, FlagsExactlyTheDegradedNodes) {
  TempDir d;
  json noise1 = base_json(), noise2 = base_json(), slow = base_json();
  scale_pinned(noise1, "H2D", 0.997);
  scale_d2d(noise2, 1.004);
  scale_gemm(noise2, 0.99);
  // 5% slower copies: still above the check's threshold, but far outside the fleet's spread.
  scale_pinned(slow, "H2D", 0.95);
  scale_pinned(slow, "D2H", 0.95);
  json gen4 = gen4_x8();
  scale_pinned(gen4, "H2D", 0.5);
  scale_pinned(gen4, "D2H", 0.5);
  const std::vector<std::string> files = {
      d.write("node01.json", base_json()), d.write("node02.json", noise1),
      d.write("node03.json", noise2), d.write("node04.json", slow), d.write("node05.json", gen4)};
  std::vector<verdict::fleet_node> nodes;
  for (const auto& f : files)
    nodes.push_back(
        {std::filesystem::path(f).stem().string(), verdict::check_of(load_record(f), defaults())});
  EXPECT_NE(overall_status(nodes[3].check.items), "FAIL");  // only the fleet sees it
  const auto f = verdict::analyze_fleet(nodes);
  std::vector<std::string> degraded;
  for (const auto& r : f.rows)
    if (r.verdict == "degraded") degraded.push_back(r.node);
  EXPECT_EQ(degraded, (std::vector<std::string>{"node04", "node05"}));
  EXPECT_TRUE(f.rows[3].cells[0].outlier);  // H2D
  EXPECT_NE(f.rows[4].why.find("PCIe link FAIL"), std::string::npos) << f.rows[4].why;
  std::vector<std::string> args = {"compare", "--fleet"};
  args.insert(args.end(), files.begin(), files.end());
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, cli::exit_worse);
  EXPECT_NE(r.out.find("node04"), std::string::npos);
  EXPECT_EQ(r.err, "gpu-basics: 2 of 5 node(s) degraded\n");
  // Without the degraded nodes the fleet is healthy.
  const auto ok = run_cli({"compare", "--fleet", files[0], files[1], files[2]});
  EXPECT_EQ(ok.code, cli::exit_ok) << ok.err;
}

TEST(Fleet, OnlyGatesAreJudged) {
  const json base = base_json();
  json noise1 = base, noise2 = base, slow = base;
  scale_pinned(noise1, "H2D", 0.997);
  scale_d2d(noise2, 1.004);
  scale_pinned(slow, "H2D", 0.95);
  scale_pinned(slow, "D2H", 0.95);
  const auto fleet = [&](const json& last) {
    std::vector<verdict::fleet_node> nodes;
    int i = 0;
    for (const json* j : std::initializer_list<const json*>{&base, &noise1, &noise2, &last})
      nodes.push_back(
          {"node0" + std::to_string(++i), verdict::check_of(record_of(*j), defaults())});
    return verdict::analyze_fleet(nodes);
  };
  EXPECT_EQ(fleet(slow).rows[3].verdict, "degraded");
  // The same figures saved without their samples are informational: shown, not judged.
  for (auto& s : slow["results"]["transfer"]["shapes"])
    for (auto& c : s["copies"]) c["seconds"] = json::array();
  const auto f = fleet(slow);
  EXPECT_EQ(f.rows[3].verdict, "ok") << f.rows[3].why;
  EXPECT_FALSE(f.rows[3].cells[0].gate);
  EXPECT_FALSE(f.rows[3].cells[0].outlier);
  EXPECT_TRUE(f.rows[0].cells[0].gate);
  EXPECT_NE(presentation::render_text(verdict::fleet_table(f)).find("(i)"), std::string::npos);
  EXPECT_EQ(verdict::to_json(f)["nodes"][3]["gates"][0], false);
}

// ---- one convention per figure (units.hpp, Note [D2D convention]) ------------------------------

namespace {

/// A table as a command printed it: the title above it, its header cells, its rows' cells.
struct printed_table {
  std::string title;
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line.substr(1));
  for (std::string cell; std::getline(in, cell, '|');) {
    const auto b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  return out;
}

/// The printed tables of `out` and the lines that are not tables (titles, notes, footers).
std::vector<printed_table> tables_in(const std::string& out, std::vector<std::string>& text) {
  std::vector<printed_table> tables;
  std::stringstream in(out);
  std::string title, line;
  bool in_table = false;
  while (std::getline(in, line)) {
    const bool row = !line.empty() && line[0] == '|';
    const bool rule = line.rfind("|--", 0) == 0 || line.rfind("|:-", 0) == 0;
    if (row && !in_table) {
      tables.push_back({title, cells_of(line), {}});
    } else if (row && !rule) {
      tables.back().rows.push_back(cells_of(line));
    } else if (!row && !line.empty()) {
      title = line;
      text.push_back(line);
    }
    in_table = row;
  }
  return tables;
}

bool mentions_d2d(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s.find("d2d") != std::string::npos || s.find("device -> device") != std::string::npos ||
         s.find("copy within one gpu") != std::string::npos;
}
bool has_rate(const std::string& s) {
  return s.find("GB/s") != std::string::npos || s.find("TB/s") != std::string::npos;
}
bool says_convention(const std::string& s) {
  return s.find(kD2dReadWrite) != std::string::npos || s.find(kD2dCopied) != std::string::npos;
}

/// Every D2D rate in a command's output says whether it is read + write or copied: the header of
/// a rate column in a D2D table (a peer matrix's diagonal is one) or naming D2D, a row that names
/// D2D beside a rate, a note or footer line that does.
void expect_d2d_conventions(const std::string& out, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<std::string> text;
  int d2d_rates = 0;
  for (const auto& t : tables_in(out, text)) {
    const bool d2d_table = mentions_d2d(t.title) || t.title.rfind("Peer copy bandwidth", 0) == 0;
    for (const auto& h : t.headers)
      if (has_rate(h) && (d2d_table || mentions_d2d(h))) {
        ++d2d_rates;
        EXPECT_TRUE(says_convention(h)) << "header '" << h << "' of '" << t.title << "'";
      }
    for (const auto& r : t.rows) {
      std::string joined;
      for (const auto& c : r) joined += c + " | ";
      if (mentions_d2d(joined) && has_rate(joined)) {
        ++d2d_rates;
        EXPECT_TRUE(says_convention(joined)) << "row of '" << t.title << "': " << joined;
      }
    }
  }
  for (const auto& line : text) {
    if (mentions_d2d(line) && has_rate(line)) {
      EXPECT_TRUE(says_convention(line)) << line;
    }
  }
  EXPECT_GT(d2d_rates + std::count_if(text.begin(), text.end(), mentions_d2d), 0)
      << "no D2D figure printed:\n"
      << out;
}

/// The first number of a printed cell ("4137.9 GB/s (86.2% of 4800.0)" -> 4137.9).
double number_in(const std::string& cell) {
  return std::stod(cell.substr(cell.find_first_of("0123456789")));
}

}  // namespace

TEST(Conventions, EveryPrintedD2dRateSaysReadPlusWriteOrCopied) {
  const std::string all = kData + "h200_all.json", all_b = kData + "h200_all_b.json";
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"check", "--from", all},
                                             {"compare", "--fleet", all, all_b, "--force"},
                                             {"show", all},
                                             {"show", kData + "h200_unified.json"},
                                             {"compare", all, all_b}}) {
    const auto r = run_cli(args);
    EXPECT_TRUE(r.code == cli::exit_ok || r.code == cli::exit_worse) << r.err;
    std::string what;
    for (const auto& a : args) what += a.substr(a.find_last_of('/') + 1) + " ";
    expect_d2d_conventions(r.out, what);
  }
  // The fleet's JSON names the convention with the figure.
  const auto f = verdict::analyze_fleet({{"a", verdict::check_of(load_record(all), defaults())}});
  EXPECT_EQ(verdict::to_json(f)["figures"][3], "D2D GB/s (read + write)");
}

TEST(Conventions, FleetCheckAndTransferGiveOneD2dFigure) {
  for (const char* file : {"h200_all.json", "h200_all_b.json"}) {
    SCOPED_TRACE(file);
    const std::string path = kData + file, stem = std::filesystem::path(path).stem().string();
    std::vector<std::string> text;
    std::optional<double> check, fleet, transfer;
    for (const auto& t : tables_in(run_cli({"check", "--from", path}).out, text))
      for (const auto& r : t.rows)
        if (mentions_d2d(r[0])) check = number_in(r[2]);
    for (const auto& t : tables_in(run_cli({"compare", "--fleet", path, "--force"}).out, text))
      for (std::size_t c = 0; c < t.headers.size(); ++c)
        if (mentions_d2d(t.headers[c]))
          for (const auto& r : t.rows)
            if (r[0] == stem) fleet = number_in(r[c]);
    for (const auto& t : tables_in(run_cli({"show", path}).out, text))  // the largest copy
      if (t.title.rfind("Device -> device", 0) == 0)
        for (std::size_t c = 0; c < t.headers.size(); ++c)
          if (t.headers[c].find(kD2dReadWrite) != std::string::npos)
            transfer = number_in(t.rows.back()[c]);
    ASSERT_TRUE(check && fleet && transfer);
    EXPECT_NEAR(*fleet, *check, 0.051);    // both print one decimal
    EXPECT_NEAR(*transfer, *check, 0.51);  // the lesson prints none
    // And the figure is read + write: twice the copy's own rate saved in the run.
    const auto c = verdict::check_of(load_record(path), defaults());
    EXPECT_NEAR(*check, 2 * c.d2d->bandwidth_bytes_per_s.median * 1e-9, 0.051);
  }
}

// ---- check's footer says what its rows say ------------------------------------------------------

namespace {

/// The footer's SKIP line of a rendered check, "" when there is none.
std::string skip_line(const check_result& c) {
  for (const auto& n : explain_check(c, device_facts{}))
    if (n.text.find("SKIP") != std::string::npos) return n.text;
  return "";
}

void expect_footer_matches_rows(const check_result& c) {
  const std::string footer = skip_line(c);
  bool skipped = false;
  for (const auto& it : c.items)
    if (it.status == "SKIP") {
      skipped = true;
      EXPECT_FALSE(it.hint.empty()) << it.name << ": a SKIP row says why";
      EXPECT_NE(footer.find(it.name), std::string::npos) << it.name << "\n" << footer;
      EXPECT_NE(footer.find("(" + it.hint + ")"), std::string::npos) << it.hint << "\n" << footer;
    }
  EXPECT_EQ(skipped, !footer.empty()) << footer;
  // The footer's reasons are the rows' reasons and no other.
  for (const char* reason : {"cannot say", "did not read", "no measurement", "permission"}) {
    if (footer.find(reason) != std::string::npos) {
      EXPECT_TRUE(std::any_of(c.items.begin(), c.items.end(), [&](const check_item& it) {
        return it.status == "SKIP" && it.hint.find(reason) != std::string::npos;
      })) << reason;
    }
  }
}

}  // namespace

TEST(Check, TheFooterSumsUpTheRowsReasonsForSkipping) {
  // A saved `all` run has no health readings: four rows say "this run did not read it".
  check_result c = verdict::check_of(record_of(base_json()), defaults());
  expect_footer_matches_rows(c);
  EXPECT_EQ(skip_line(c),
            "SKIP is not a failure; here: uncorrectable ECC errors, retired pages, row remapping, "
            "throttling while idle (this run did not read it).");
  // NVML's other answers, and a copy not measured: one reason each, in the rows' order.
  c.health.ecc_status = "no permission";
  c.health.retired_status = "not supported";
  c.health.remap_status = "not supported";
  c.d2d.reset();
  c.items = evaluate_check(c);
  expect_footer_matches_rows(c);
  const std::string footer = skip_line(c);
  EXPECT_NE(footer.find("D2D (read + write) (no measurement in this run); uncorrectable ECC "
                        "errors (NVML gave no reading (no permission)); retired pages, row "
                        "remapping (the GPU or driver cannot say); throttling while idle (this "
                        "run did not read it)."),
            std::string::npos)
      << footer;
  // Nothing skipped, no SKIP line.
  c.d2d = verdict::check_of(record_of(base_json()), defaults()).d2d;
  c.health = {};
  for (auto* s : {&c.health.ecc_status, &c.health.retired_status, &c.health.remap_status,
                  &c.health.throttle_status})
    *s = "ok";
  c.health.ecc_uncorrected_volatile = 0;
  c.health.retired_pages = 0;
  c.health.remap_failure = false;
  c.health.idle_clock_event_reasons = 0;
  c.items = evaluate_check(c);
  expect_footer_matches_rows(c);
  EXPECT_EQ(skip_line(c), "");
}

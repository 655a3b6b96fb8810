// The summary at the top of the HTML report: the headline figures computed from the fixtures'
// results (read here from the JSON, apart from the report's own reading), the change between two
// runs, the verdict of a check run, and links that each land on an element of the page.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/report/report.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "test_data.hpp"

using namespace gpu_basics;

namespace {

using gpu_basics::testing::kData;

nlohmann::json fixture(const std::string& name) {
  std::ifstream in(kData + name);
  return nlohmann::json::parse(in);
}

/// The summary section of a page.
std::string summary_of(const std::string& html) {
  const auto from = html.find("<section id=\"summary\"");
  if (from == std::string::npos) return "";
  return html.substr(from, html.find("</section>", from) - from);
}

/// The table row whose header cell holds `name`.
std::string row_of(const std::string& summary, const std::string& name) {
  const auto at = summary.find(name + "</");
  if (at == std::string::npos) return "";
  const auto start = summary.rfind("<tr>", at);
  return summary.substr(start, summary.find("</tr>", at) - start);
}

/// The median of the largest pinned copy of `direction` in a fixture's tensor shapes.
double largest_pinned(const nlohmann::json& run, const std::string& direction) {
  std::uint64_t bytes = 0;
  double median = 0;
  for (const auto& s : run["results"]["transfer"]["shapes"])
    for (const auto& c : s["copies"])
      if (c["direction"] == direction && c["memory"] == "pinned" && c["bytes"] >= bytes) {
        bytes = c["bytes"];
        median = c["bandwidth_bytes_per_s"]["median"];
      }
  return median;
}

double largest_bf16(const nlohmann::json& run) {
  std::uint64_t size = 0;
  double median = 0;
  for (const auto& r : run["results"]["profile"]["matmul"]["runs"])
    if (r["precision"] == "bf16" && r["m"].get<std::uint64_t>() >= size) {
      size = r["m"];
      median = r["flops_per_s"]["median"];
    }
  return median;
}

}  // namespace

TEST(ReportSummary, OneRunShowsTheHeadlineFiguresOfItsResults) {
  const std::string html = report::render_html(report::load_runs({kData + "h200_all.json"}));
  const std::string s = summary_of(html);
  ASSERT_FALSE(s.empty());
  // First in the page's body: before every lesson's section.
  EXPECT_LT(html.find("<section id=\"summary\""), html.find("<section id=\"info\""));

  const auto j = fixture("h200_all.json");
  const auto& t = j["results"]["transfer"];
  const double link = t["link_bytes_per_s"];
  for (const char* dir : {"H2D", "D2H"}) {
    SCOPED_TRACE(dir);
    const double v = largest_pinned(j, dir);
    const std::string row = row_of(s, std::string("pinned ") + dir);
    EXPECT_NE(row.find(fmt::format("{:.1f} GB/s", v / 1e9)), std::string::npos) << row;
    EXPECT_NE(row.find(fmt::format("{:.0f}% of the link", 100 * v / link)), std::string::npos)
        << row;
    EXPECT_NE(row.find("href=\"#transfer-bandwidth\""), std::string::npos) << row;
  }
  double d2d = 0;
  std::uint64_t d2d_bytes = 0;
  for (const auto& c : t["d2d"])
    if (c["bytes"].get<std::uint64_t>() >= d2d_bytes) {
      d2d_bytes = c["bytes"];
      d2d = 2 * c["bandwidth_bytes_per_s"]["median"].get<double>();  // read + write
    }
  const std::string d2d_row = row_of(s, "D2D (read + write)");
  EXPECT_NE(d2d_row.find(fmt::format("{:.1f} GB/s", d2d / 1e9)), std::string::npos) << d2d_row;
  EXPECT_NE(d2d_row.find(fmt::format("{:.0f}% of the HBM datasheet",
                                     100 * d2d / t["hbm_bytes_per_s"].get<double>())),
            std::string::npos)
      << d2d_row;
  const double bidi = t["streams"]["bidirectional"]["bandwidth_bytes_per_s"]["median"];
  EXPECT_NE(row_of(s, "H2D + D2H at once").find(fmt::format("{:.1f} GB/s", bidi / 1e9)),
            std::string::npos);
  const std::string gemm = row_of(s, "bf16 GEMM");
  EXPECT_NE(gemm.find(fmt::format("{:.1f} TFLOP/s", largest_bf16(j) / 1e12)), std::string::npos)
      << gemm;
  EXPECT_NE(gemm.find("href=\"#profile-matmul\""), std::string::npos) << gemm;

  // An `all` run carries no verdict: the summary says how to get one, and shows no badge.
  EXPECT_NE(s.find("gpu-basics check --from h200_all.json"), std::string::npos);
  EXPECT_EQ(s.find("class=\"verdict "), std::string::npos);
  EXPECT_EQ(s.find(">change<"), std::string::npos);  // one run: nothing to change from
}

TEST(ReportSummary, EveryLinkLandsOnThePageAndEverySectionAndFigureIsLinked) {
  for (const auto& files : std::vector<std::vector<std::string>>{
           {"h200_all.json"}, {"h200_all.json", "h200_all_b.json"}, {"h200_unified.json"}}) {
    SCOPED_TRACE(files.front());
    std::vector<std::string> paths;
    for (const auto& f : files) paths.push_back(kData + f);
    const std::string html = report::render_html(report::load_runs(paths));
    const std::string s = summary_of(html);
    std::set<std::string> ids, linked;
    const std::regex id_re("id=\"([^\"]+)\""), href_re("href=\"#([^\"]+)\"");
    for (auto it = std::sregex_iterator(html.begin(), html.end(), id_re);
         it != std::sregex_iterator(); ++it)
      ids.insert((*it)[1]);
    for (auto it = std::sregex_iterator(s.begin(), s.end(), href_re); it != std::sregex_iterator();
         ++it)
      linked.insert((*it)[1]);
    for (const auto& l : linked) EXPECT_TRUE(ids.count(l)) << "#" << l << " is on no element";
    const std::regex target_re("<(?:section|figure class=\"figure\") id=\"([^\"]+)\"");
    std::size_t targets = 0;
    for (auto it = std::sregex_iterator(html.begin(), html.end(), target_re);
         it != std::sregex_iterator(); ++it) {
      if ((*it)[1] == "summary") continue;
      ++targets;
      EXPECT_TRUE(linked.count((*it)[1])) << "the summary has no link to #" << (*it)[1];
    }
    EXPECT_GE(targets, 3u);
  }
}

TEST(ReportSummary, TwoRunsSideBySideWithTheChange) {
  const std::string html =
      report::render_html(report::load_runs({kData + "h200_all.json", kData + "h200_all_b.json"}));
  const std::string s = summary_of(html);
  EXPECT_NE(s.find(">h200_all<"), std::string::npos);
  EXPECT_NE(s.find(">h200_all_b<"), std::string::npos);
  EXPECT_NE(s.find(">change<"), std::string::npos);
  const auto a = fixture("h200_all.json"), b = fixture("h200_all_b.json");
  for (const auto& [name, va, vb] :
       {std::tuple{"pinned H2D", largest_pinned(a, "H2D"), largest_pinned(b, "H2D")},
        std::tuple{"bf16 GEMM", largest_bf16(a), largest_bf16(b)}}) {
    SCOPED_TRACE(name);
    const double pct = 100 * (vb / va - 1);
    const std::string want =
        fmt::format("{}{:.1f}%", pct < 0 ? "\u2212" : (pct > 0 ? "+" : "\u00b1"), std::abs(pct));
    EXPECT_NE(row_of(s, name).find(want), std::string::npos) << want << " in " << row_of(s, name);
  }
}

TEST(ReportSummary, ACheckRunShowsItsVerdictAndWhatDidNotPass) {
  // A check judged from the committed run, as `gpu-basics check --from` saves it, with an H2D
  // threshold above what it measured: FAIL, and the failing check with its hint.
  const auto saved = lessons::load_record(kData + "h200_all.json");
  lessons::check_thresholds strict;
  strict.h2d_fraction = 0.99;
  lessons::run_record rec;
  rec.command = "check";
  rec.environment = saved.environment;
  rec.source = "node7.json";
  const auto result = verdict::check_of(saved, strict);
  rec.results.emplace_back("check", nlohmann::json(result));
  ASSERT_EQ(lessons::overall_status(result.items), "FAIL");

  const std::string s = summary_of(report::render_html(report::label_runs({rec})));
  const std::string verdict_row = row_of(s, "check verdict");
  EXPECT_NE(verdict_row.find("verdict-fail\">FAIL<"), std::string::npos) << verdict_row;
  const auto h2d = std::find_if(result.items.begin(), result.items.end(),
                                [](const auto& i) { return i.id == "h2d"; });
  ASSERT_NE(h2d, result.items.end());
  EXPECT_NE(s.find("pinned H2D: " + h2d->value), std::string::npos);
  // Its end: the start may hold characters the page escapes ("<").
  EXPECT_NE(s.find(h2d->hint.substr(h2d->hint.size() - 24)), std::string::npos) << h2d->hint;
  EXPECT_EQ(s.find("gpu-basics check --from"), std::string::npos);  // it has a verdict
  // The figures link to the check's section: a check run draws no transfer figures.
  EXPECT_NE(row_of(s, "pinned H2D").find("href=\"#check\""), std::string::npos);

  // Beside an unchecked run: a verdict for one, "not checked" for the other.
  auto runs = report::load_runs({kData + "h200_all_b.json"});
  runs.insert(runs.begin(), report::label_runs({rec}).front());
  const std::string both = summary_of(report::render_html(runs));
  EXPECT_NE(row_of(both, "check verdict").find("not checked"), std::string::npos);
  EXPECT_NE(row_of(both, "check verdict").find("FAIL"), std::string::npos);
}

TEST(ReportSummary, ARunWithoutFiguresHasLinksButNoTable) {
  const std::string s =
      summary_of(report::render_html(report::load_runs({kData + "h200_unified.json"})));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.find("<table"), std::string::npos);
  EXPECT_NE(s.find("href=\"#unified\""), std::string::npos);
}

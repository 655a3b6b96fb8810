// The HTML report on the CPU, from the H200 fixtures: what the page holds (charts and their
// series, notes, tables, the inlined library, nothing fetched), several runs overlaid, labels, and
// every bad input as one line and exit 2 with nothing written. The browser test
// (tests/browser/) checks the same page drawn in Chromium.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/report/report.hpp"
#include "run.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
namespace fs = std::filesystem;

namespace {

using gpu_basics::testing::kData;

using gpu_basics::testing::slurp;

/// The charts' configurations the page embeds.
nlohmann::json charts_in(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"gb-charts\">";
  const auto from = html.find(open);
  if (from == std::string::npos) return nullptr;
  const auto to = html.find("</script>", from);
  return nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()));
}

const nlohmann::json* chart(const nlohmann::json& charts, const std::string& id) {
  for (const auto& c : charts)
    if (c["id"] == id) return &c;
  return nullptr;
}

int report_cli(const std::vector<std::string>& inputs, const std::string& out_path,
               std::string* out, std::string* err) {
  cli::options o;
  o.command = "report";
  o.input_paths = inputs;
  o.html_path = out_path;
  std::ostringstream os, es;
  const int rc = cli::run(o, os, es);
  *out = os.str();
  *err = es.str();
  return rc;
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("gb-report-" + std::to_string(::getpid()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
};

}  // namespace

TEST(Report, OneRunHasEveryChartWithItsSeriesNotesAndTables) {
  const auto runs = report::load_runs({kData + "h200_all.json"});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].label, "h200_all");
  const std::string html = report::render_html(runs);
  const auto charts = charts_in(html);
  ASSERT_TRUE(charts.is_array());
  EXPECT_GE(charts.size(), 15u);
  for (const auto& c : charts) {
    SCOPED_TRACE(c["id"].get<std::string>());
    EXPECT_FALSE(c["config"]["data"]["datasets"].empty());
    EXPECT_FALSE(c["title"].get<std::string>().empty());
    for (const auto& [axis, scale] : c["config"]["options"]["scales"].items())
      EXPECT_FALSE(scale["title"]["text"].get<std::string>().empty()) << axis;
    // Its canvas is on the page.
    EXPECT_NE(html.find("data-chart=\"" + c["id"].get<std::string>() + "\""), std::string::npos);
  }
  // The bandwidth chart: one series per direction and host memory, on log axes, with the link's
  // theoretical rate and the measured pinned ceiling as lines.
  const auto* bw = chart(charts, "transfer-bandwidth-size");
  ASSERT_NE(bw, nullptr);
  EXPECT_EQ((*bw)["config"]["options"]["scales"]["x"]["type"], "logarithmic");
  EXPECT_EQ((*bw)["config"]["options"]["scales"]["y"]["type"], "logarithmic");
  const auto& lines = (*bw)["config"]["options"]["plugins"]["annotation"]["annotations"];
  ASSERT_TRUE(lines.contains("link0"));
  EXPECT_NEAR(lines["link0"]["yMin"].get<double>(), 63.0, 0.1);  // PCIe Gen5 x16
  ASSERT_TRUE(lines.contains("ceiling0"));
  EXPECT_GT(lines["ceiling0"]["yMin"].get<double>(), 50.0);
  EXPECT_LT(lines["ceiling0"]["yMin"].get<double>(), 63.0);
  // The Gantt: the measured batches of the double mode, every one of them.
  const auto* gantt = chart(charts, "transfer-double-buffer-batches");
  ASSERT_NE(gantt, nullptr);
  ASSERT_EQ((*gantt)["config"]["data"]["datasets"].size(), 2u);
  EXPECT_EQ((*gantt)["config"]["data"]["datasets"][0]["data"].size(), 32u);
  for (const auto& bar : (*gantt)["config"]["data"]["datasets"][1]["data"])
    EXPECT_LT(bar["x"][0].get<double>(), bar["x"][1].get<double>());
  // Notes beside the charts and the numbers under them, from the lessons' own tables.
  EXPECT_NE(html.find("The link: PCIe Gen5 x16"), std::string::npos);
  EXPECT_NE(html.find("<caption>What one allocation + free costs"), std::string::npos);
  EXPECT_NE(html.find("<section id=\"environment\">"), std::string::npos);
  EXPECT_NE(html.find("NVIDIA H200"), std::string::npos);
}

TEST(Report, IsOneFileThatFetchesNothing) {
  const std::string html = report::render_html(report::load_runs({kData + "h200_all.json"}));
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_NE(html.find("Chart.js v4"), std::string::npos);  // the library's banner, inlined
  EXPECT_NE(html.find("chartjs-plugin-annotation"), std::string::npos);
  EXPECT_NE(html.find("chartjs-chart-matrix"), std::string::npos);
  EXPECT_NE(html.find("prefers-color-scheme: dark"), std::string::npos);
  EXPECT_LE(html.size(), 2u << 20);
}

TEST(Report, TwoRunsOverlayInTheSameChartsUnderTheirLabels) {
  // The same file twice: distinct labels, and every chart carries both runs' series.
  const auto runs = report::load_runs({kData + "h200_all.json", kData + "h200_all.json"});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].label, "h200_all");
  EXPECT_EQ(runs[1].label, "h200_all (2)");
  const auto one = charts_in(report::render_html({runs[0]}));
  const auto two = charts_in(report::render_html(runs));
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    SCOPED_TRACE(one[i]["id"].get<std::string>());
    const auto n1 = one[i]["config"]["data"]["datasets"].size();
    const auto n2 = two[i]["config"]["data"]["datasets"].size();
    if (one[i]["id"] == "profile-matmul")
      EXPECT_EQ(n2, 2 * n1 - 1);  // one datasheet-peak series for both
    else
      EXPECT_EQ(n2, 2 * n1);
    bool labelled = false;
    for (const auto& ds : two[i]["config"]["data"]["datasets"])
      labelled = labelled || ds["label"].get<std::string>().starts_with("h200_all (2): ");
    EXPECT_TRUE(labelled);
  }
  // The same link on both: one reference line, not two.
  const auto* bw = chart(two, "transfer-bandwidth-size");
  ASSERT_NE(bw, nullptr);
  EXPECT_FALSE(
      (*bw)["config"]["options"]["plugins"]["annotation"]["annotations"].contains("link1"));
}

TEST(Report, SchemaOneFilesAreDrawnToo) {
  const auto runs = report::load_runs({kData + "h200_all_v1.json"});
  const auto charts = charts_in(report::render_html(runs));
  EXPECT_NE(chart(charts, "transfer-bandwidth-size"), nullptr);
  EXPECT_NE(chart(charts, "profile-matmul"), nullptr);
}

TEST(Report, TextFromAResultIsEscaped) {
  auto runs = report::load_runs({kData + "h200_all.json"});
  runs[0].label = "<img src=x onerror=alert(1)>";
  runs[0].record.environment["host"]["hostname"] = "</script><script>alert(1)</script>";
  const std::string html = report::render_html({runs[0], runs[0]});
  EXPECT_EQ(html.find("<img src=x"), std::string::npos);
  EXPECT_EQ(html.find("</script><script>alert(1)"), std::string::npos);
  EXPECT_NO_THROW((void)charts_in(html));
  EXPECT_EQ(report::live_label(runs[0].record), "</script><script>alert(1)</script>");
}

TEST(Report, CliWritesTheFileAndSaysSo) {
  temp_dir dir;
  const std::string path = (dir.path / "sub" / "r.html").string();
  std::string out, err;
  ASSERT_EQ(report_cli({kData + "h200_all.json"}, path, &out, &err), cli::exit_ok) << err;
  EXPECT_NE(out.find("wrote " + path), std::string::npos) << out;
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_EQ(slurp(path).rfind("<!DOCTYPE html>", 0), 0u);
}

TEST(Report, BadInputIsOneLineExitTwoAndWritesNothing) {
  temp_dir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    const auto p = (dir.path / name).string();
    std::ofstream(p) << text;
    return p;
  };
  const std::string whole = slurp(kData + "h200_all.json");
  nlohmann::json newer = nlohmann::json::parse(whole);
  newer["schema_version"] = 99;
  const std::string out_path = (dir.path / "r.html").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("foreign.json", R"({"name": "not ours", "rows": [1, 2]})"), "foreign.json"},
      {write("truncated.json", whole.substr(0, whole.size() / 2)), "truncated.json"},
      {write("newer.json", newer.dump()), "99"},
      {write("text.json", "hello"), "not JSON"},
      {(dir.path / "missing.json").string(), "missing.json"},
  };
  for (const auto& [input, says] : cases) {
    SCOPED_TRACE(input);
    std::string out, err;
    EXPECT_EQ(report_cli({kData + "h200_all.json", input}, out_path, &out, &err), cli::exit_usage);
    EXPECT_NE(err.find(says), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(err.rfind("gpu-basics: ", 0), 0u) << err;
    EXPECT_FALSE(fs::exists(out_path));
  }
  // An output that cannot be written: a directory in the way, a parent that is a file.
  const std::string file = write("plain", "x");
  for (const std::string& bad : {dir.path.string(), file + "/r.html"}) {
    SCOPED_TRACE(bad);
    std::string out, err;
    EXPECT_EQ(report_cli({kData + "h200_all.json"}, bad, &out, &err), cli::exit_usage);
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(slurp(file), "x");
  }
  for (const auto& entry : fs::directory_iterator(dir.path))  // no temporary file left behind
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

TEST(Report, CommandLine) {
  std::ostringstream o, e;
  const auto r = cli::parse({"gpu-basics", "report", "a.json", "b.json", "-o", "r.html"}, o, e);
  ASSERT_TRUE(r.opts);
  EXPECT_EQ(r.opts->input_paths, (std::vector<std::string>{"a.json", "b.json"}));
  EXPECT_EQ(r.opts->html_path, "r.html");
  EXPECT_EQ(cli::parse({"gpu-basics", "report", "a.json"}, o, e).exit_code, cli::exit_usage);
  EXPECT_EQ(cli::parse({"gpu-basics", "report", "-o", "r.html"}, o, e).exit_code, cli::exit_usage);
  EXPECT_EQ(cli::parse({"gpu-basics", "report", "a.json", "-o", "-"}, o, e).exit_code,
            cli::exit_usage);
  const auto lesson = cli::parse({"gpu-basics", "transfer", "--html", "t.html"}, o, e);
  ASSERT_TRUE(lesson.opts);
  EXPECT_EQ(lesson.opts->html_path, "t.html");
  EXPECT_EQ(cli::parse({"gpu-basics", "all", "--html", "-"}, o, e).exit_code, cli::exit_usage);
}

TEST(Report, RenderingStopsOnASignalBetweenFigures) {
  // The files are read; the signal arrives while the page is drawn.
  const auto runs = report::load_runs({kData + "h200_all.json"});
  install_interrupt_handlers();
  std::raise(SIGINT);
  EXPECT_THROW((void)report::render_html(runs), interrupted);
  clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

TEST(Report, APeerMatrixThatDoesNotMatchItsDevicesIsABadInput) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(kData + "h200_all.json"));
  auto& t = j["results"]["transfer"];
  if (!t.contains("multi_gpu") || t["multi_gpu"].is_null())
    GTEST_SKIP() << "the fixture has no peer matrix";
  t["multi_gpu"]["peer"]["devices"] = nlohmann::json::array();
  temp_dir d;
  const std::string in = (d.path / "peer.json").string();
  std::ofstream(in) << j.dump();
  std::string out, err;
  EXPECT_EQ(report_cli({in}, (d.path / "r.html").string(), &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("peer.json: results.transfer.multi_gpu.peer: 0 device(s)"), std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(d.path / "r.html"));
}

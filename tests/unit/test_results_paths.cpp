// A value a results file holds in the wrong kind is refused in one line naming the file and the
// key path from the file's top: "run.json: results.transfer.shapes[0].copies[1].seconds[3]:
// expected a number, got null", for every lesson, in schema 2 and in schema-1 files, for show,
// report and the fleet alike. And the parser behind the results files reads what nlohmann reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/report/report.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

using gpu_basics::testing::kData;

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

/// `fixture` with `edit` applied, written to a file of its own; returns its path.
std::string edited(const std::string& fixture, const std::string& name,
                   const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = load_json(kData + fixture);
  edit(j);
  // Per test: ctest runs the tests of this file in parallel, on the same fixtures' names.
  const std::string path = ::testing::TempDir() + "gb_paths_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                           name + ".json";
  std::ofstream(path, std::ios::binary) << j.dump(2);
  return path;
}

/// The message of the format_error that `read` throws ("" when it throws none).
std::string message_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const format_error& e) {
    return e.what();
  }
  return "";
}

/// Checks that `message` is "<path>: <where>: <detail>", one line, no nlohmann exception id.
void expect_message(const std::string& message, const std::string& path, const std::string& where,
                    const std::string& detail) {
  EXPECT_EQ(message, path + ": " + where + ": " + detail);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
}

struct schema2_case {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  const char* where;
  const char* detail;
};

const std::vector<schema2_case>& schema2_cases() {
  static const std::vector<schema2_case> cases = {
      {"transfer",
       [](nlohmann::json& j) {
         j["results"]["transfer"]["shapes"][1]["copies"][2]["seconds"][3] = nullptr;
       },
       "results.transfer.shapes[1].copies[2].seconds[3]", "expected a number, got null"},
      {"transfer_summary",
       [](nlohmann::json& j) { j["results"]["transfer"]["d2d"][0]["time_s"]["median"] = "fast"; },
       "results.transfer.d2d[0].time_s.median", "expected a number, got \"fast\""},
      {"transfer_null_figure",
       [](nlohmann::json& j) { j["results"]["transfer"]["shapes"][0]["copies"][3] = nullptr; },
       "results.transfer.shapes[0].copies[3]", "expected an object, got null"},
      {"memory",
       [](nlohmann::json& j) {
         j["results"]["memory"]["allocation_cost"]["rows"][1]["bytes"] = -1;
       },
       "results.memory.allocation_cost.rows[1].bytes",
       "expected an integer in 0..18446744073709551615, got -1"},
      {"profile",
       [](nlohmann::json& j) { j["results"]["profile"]["nvml"]["series"][2]["values"][7] = true; },
       "results.profile.nvml.series[2].values[7]", "expected a number, got true"},
      {"profile_list",
       [](nlohmann::json& j) {
         j["results"]["profile"]["matmul"]["runs"] = {{"m", 1}};
       },
       "results.profile.matmul.runs", "expected a list, got an object"},
      {"double_buffer",
       [](nlohmann::json& j) {
         j["results"]["transfer"]["double_buffer"]["ratios"][2]["modes"][1]["batches"][4]
          ["copy_end_s"] = "late";
       },
       "results.transfer.double_buffer.ratios[2].modes[1].batches[4].copy_end_s",
       "expected a number, got \"late\""},
      {"multi_gpu",
       [](nlohmann::json& j) {
         j["results"]["transfer"]["multi_gpu"]["nccl"]["sizes"][5]["ops"][1]["ranks"] = 2.5;
       },
       "results.transfer.multi_gpu.nccl.sizes[5].ops[1].ranks", "expected an integer, got 2.5"},
      {"info", [](nlohmann::json& j) { j["results"]["info"]["gpus"][0]["sm_count"] = "many"; },
       "results.info.gpus[0].sm_count", "expected an integer, got \"many\""},
  };
  return cases;
}

}  // namespace

TEST(ResultsPaths, ShowNamesTheKeyPathOfEachLessonsBadValue) {
  for (const auto& c : schema2_cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = edited("h200_all.json", c.name, c.edit);
    const run_record rec = load_record(path);  // the JSON is sound: reading it is the lesson's
    expect_message(message_of([&] { (void)render(rec); }), path, c.where, c.detail);
  }
}

TEST(ResultsPaths, ReportNamesTheKeyPath) {
  for (const auto& c : schema2_cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = edited("h200_all.json", c.name, c.edit);
    expect_message(message_of([&] { (void)report::render_html(report::load_runs({path})); }), path,
                   c.where, c.detail);
  }
}

TEST(ResultsPaths, TheFleetNamesTheKeyPath) {
  const auto t = thresholds_of(config{});
  const std::string transfer = edited("h200_all.json", "fleet_transfer", [](nlohmann::json& j) {
    j["results"]["transfer"]["streams"]["bidirectional"]["bandwidth_bytes_per_s"] = {1, 2};
  });
  expect_message(message_of([&] { (void)verdict::check_of(load_record(transfer), t); }), transfer,
                 "results.transfer.streams.bidirectional.bandwidth_bytes_per_s",
                 "expected an object, got a list");
  const std::string profile = edited("h200_all.json", "fleet_profile", [](nlohmann::json& j) {
    j["results"]["profile"]["matmul"]["runs"][1]["k"] = "big";
  });
  expect_message(message_of([&] { (void)verdict::check_of(load_record(profile), t); }), profile,
                 "results.profile.matmul.runs[1].k", "expected an integer, got \"big\"");
  const std::string gpu = edited("h200_all.json", "fleet_gpu", [](nlohmann::json& j) {
    j["environment"]["gpus"][0]["pcie_width_max"] = "x16";
  });
  expect_message(message_of([&] { (void)verdict::check_of(load_record(gpu), t); }), gpu,
                 "environment.gpus[0].pcie_width_max", "expected an integer, got \"x16\"");
}

TEST(ResultsPaths, SchemaOneNamesTheKeyPathInTheFile) {
  // h200_all_v1.json: tables[1] memory.allocation_cost, [6] transfer.bandwidth, [12]
  // transfer.double_buffer, [14] transfer.p2p_bandwidth, [20] profile.timing_methods.
  const auto j = load_json(kData + "h200_all_v1.json");
  ASSERT_EQ(j["tables"][1]["id"], "memory.allocation_cost");
  ASSERT_EQ(j["tables"][6]["id"], "transfer.bandwidth");
  ASSERT_EQ(j["tables"][12]["id"], "transfer.double_buffer");
  ASSERT_EQ(j["tables"][14]["id"], "transfer.p2p_bandwidth");
  ASSERT_EQ(j["tables"][20]["id"], "profile.timing_methods");
  const schema2_case cases[] = {
      {"v1_memory", [](nlohmann::json& f) { f["tables"][1]["rows"][0]["cuda_malloc_s"] = nullptr; },
       "tables[1].rows[0].cuda_malloc_s", "expected a number, got null"},
      {"v1_transfer", [](nlohmann::json& f) { f["tables"][6]["rows"][1]["bytes"] = "many"; },
       "tables[6].rows[1].bytes", "expected an integer, got \"many\""},
      {"v1_double_buffer",
       [](nlohmann::json& f) { f["tables"][12]["rows"][0]["compute_to_copy"] = "x"; },
       "tables[12].rows[0].compute_to_copy", "expected a number, got \"x\""},
      {"v1_multi_gpu", [](nlohmann::json& f) { f["tables"][14]["rows"][0]["to_gpu_0"] = "fast"; },
       "tables[14].rows[0].to_gpu_0", "expected a number, got \"fast\""},
      {"v1_profile", [](nlohmann::json& f) { f["tables"][20]["rows"][0]["median_s"] = nullptr; },
       "tables[20].rows[0].median_s", "expected a number, got null"},
      {"v1_profile_missing", [](nlohmann::json& f) { f["tables"][20]["rows"][1].erase("method"); },
       "tables[20].rows[1].method", "missing"},
      {"v1_transfer_extra",
       [](nlohmann::json& f) { f["transfer"]["measurements"][0]["bytes"] = "four"; },
       "transfer.measurements[0].bytes", "expected an integer, got \"four\""},
      {"v1_info", [](nlohmann::json& f) { f["info"]["gpus"][0]["pcie_width_max"] = -5; },
       "info.gpus[0].pcie_width_max", "expected an integer in 0..4294967295, got -5"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = edited("h200_all_v1.json", c.name, c.edit);
    expect_message(message_of([&] { (void)load_record(path); }), path, c.where, c.detail);
  }
}

TEST(ResultsPaths, OneLessonSchemaOneFileNamesTopLevelKeys) {
  // `gpu-basics transfer --json` of schema 1 kept the lesson's extras at the top level.
  nlohmann::json all = load_json(kData + "h200_all_v1.json");
  nlohmann::json one = {{"schema_version", 1},
                        {"command", "transfer"},
                        {"environment", all["environment"]},
                        {"tables", nlohmann::json::array()}};
  for (const auto& t : all["tables"]) {
    const std::string id = t["id"];
    if (!id.starts_with("transfer.")) continue;
    auto copy = t;
    copy["id"] = id.substr(9);
    one["tables"].push_back(copy);
  }
  for (const auto& [k, v] : all["transfer"].items()) one[k] = v;
  one["sync_async"][1]["async_copy_s"]["p25"] = "low";
  const std::string path = ::testing::TempDir() + "gb_paths_v1_one.json";
  std::ofstream(path, std::ios::binary) << one.dump();
  expect_message(message_of([&] { (void)load_record(path); }), path,
                 "sync_async[1].async_copy_s.p25", "expected a number, got \"low\"");
}

TEST(ResultsPaths, ReadJsonChecksKindsAndRanges) {
  int i = 0;
  EXPECT_THROW(read_json(nlohmann::json(2147483648LL), i), json_path_error);
  EXPECT_THROW(read_json(nlohmann::json(-2147483649LL), i), json_path_error);
  read_json(nlohmann::json(-2147483648LL), i);
  EXPECT_EQ(i, -2147483648LL);
  read_json(nlohmann::json(20.0), i);  // a whole number written as a float
  EXPECT_EQ(i, 20);
  unsigned u = 0;
  EXPECT_THROW(read_json(nlohmann::json(1e10), u), json_path_error);
  std::uint64_t big = 0;
  EXPECT_THROW(read_json(nlohmann::json(1.8446744073709552e19), big), json_path_error);
  std::vector<std::optional<double>> v;
  read_json(nlohmann::json::parse("[1, null, 2.5]"), v);
  EXPECT_EQ(v, (std::vector<std::optional<double>>{1.0, std::nullopt, 2.5}));
  try {
    std::vector<std::vector<std::string>> nested;
    read_json(nlohmann::json::parse(R"([["a"], ["b", 3]])"), nested);
    ADD_FAILURE() << "read a number as a string";
  } catch (const json_path_error& e) {
    EXPECT_EQ(e.path(), "[1][1]");
    EXPECT_EQ(std::string(e.what()), "[1][1]: expected a string, got 3");
  }
  json_path_error e("expected a number, got null");
  e.prepend_index(3);
  e.prepend_key("seconds");
  e.prepend_key(std::string(100, 'k') + "\x1b");
  EXPECT_EQ(e.path(), std::string(64, 'k') + "....seconds[3]");
}

// ---- the parser --------------------------------------------------------------------------

TEST(ResultsJsonParser, ReadsTheFixturesAsNlohmannDoes) {
  for (const char* f : {"h200_all.json", "h200_all_b.json", "h200_all_v1.json"}) {
    SCOPED_TRACE(f);
    std::ifstream in(kData + f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(parse_results_json(ss.str(), f), nlohmann::json::parse(ss.str()));
  }
}

TEST(ResultsJsonParser, ReadsEveryKindOfValueAsNlohmannDoes) {
  for (const std::string text : {"0",
                                 "-0",
                                 "1",
                                 "-1",
                                 "18446744073709551615",
                                 "18446744073709551616",
                                 "-9223372036854775808",
                                 "-9223372036854775809",
                                 "1.5",
                                 "-1.5e-3",
                                 "1E+2",
                                 "1e-400",
                                 "2.2250738585072014e-308",
                                 "4.9e-324",
                                 "123456789012345678901234567890",
                                 "true",
                                 "false",
                                 "null",
                                 R"("")",
                                 R"("a\"b\\c\/d\b\f\n\r\t")",
                                 R"("\u00e9\u4e2d\ud83d\ude00")",
                                 "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"",
                                 "[]",
                                 "{}",
                                 " [ 1 , [ ] , { } ] ",
                                 R"({"b": 1, "a": [2, {"c": null}]})",
                                 R"({"a": 1, "a": 2})",
                                 "\xEF\xBB\xBF{}"}) {
    SCOPED_TRACE(text);
    const auto mine = parse_results_json(text, "t");
    const auto theirs = nlohmann::json::parse(text);
    EXPECT_EQ(mine, theirs);
    EXPECT_EQ(mine.type(), theirs.type());
    EXPECT_EQ(mine.dump(), theirs.dump());
  }
}

TEST(ResultsJsonParser, RefusesWhatIsNotJsonWithLineAndColumn) {
  for (const std::string text : {"",
                                 " ",
                                 "[1,]",
                                 "[1 2]",
                                 "{\"a\" 1}",
                                 "{\"a\": 1,}",
                                 "{a: 1}",
                                 "01",
                                 "1.",
                                 "1e",
                                 "-",
                                 "+1",
                                 ".5",
                                 "tru",
                                 "nul",
                                 "[",
                                 "{",
                                 "\"abc",
                                 R"("\x")",
                                 R"("\u12")",
                                 R"("\ud800")",
                                 R"("\udc00")",
                                 R"("\ud800\u0041")",
                                 "\"\x01\"",
                                 "\"\xff\"",
                                 "\"\xc0\x80\"",
                                 "\"\xed\xa0\x80\"",
                                 "\"\xf4\x90\x80\x80\"",
                                 "\"\xe4\xb8\"",
                                 "[1] 2",
                                 "NaN",
                                 "[Infinity]"}) {
    SCOPED_TRACE(text);
    EXPECT_THROW(
        {
          const auto j = nlohmann::json::parse(text);
          (void)j;
        },
        nlohmann::json::parse_error);
    const std::string m = message_of([&] { (void)parse_results_json(text, "t.json"); });
    EXPECT_TRUE(m.starts_with("t.json: not JSON at line 1, column ")) << m;
  }
  const std::string m =
      message_of([] { (void)parse_results_json("{\n  \"a\": [1,\n    {\"b\": tru}]}", "t.json"); });
  EXPECT_EQ(m, "t.json: not JSON at line 3, column 11 (a[1].b): expected a value, got \"t\"");
}

TEST(ResultsJsonParser, RefusesValuesBeyondItsLimitsNamingTheirPath) {
  EXPECT_EQ(message_of([] { (void)parse_results_json(R"({"x": [1, 1e400]})", "t.json"); }),
            "t.json: x[1]: a number outside the range of a double");
  EXPECT_EQ(message_of([] { (void)parse_results_json(R"({"x": [-1e400]})", "t.json"); }),
            "t.json: x[0]: a number outside the range of a double");
  EXPECT_EQ(message_of([] {
              (void)parse_results_json(
                  R"({"a": {"b": ")" + std::string(kMaxResultsString + 1, 'x') + R"("}})",
                  "t.json");
            }),
            "t.json: a.b: a string of 65537 bytes; at most 64 KiB");
  EXPECT_EQ(message_of([] {
              (void)parse_results_json(
                  R"({"a": {")" + std::string(kMaxResultsString + 1, 'k') + R"(": 1}})", "t.json");
            }),
            "t.json: a: a key of 65537 bytes; at most 64 KiB");
  EXPECT_EQ(
      message_of([] {
        (void)parse_results_json("{\"a\": " + std::string(64, '[') + std::string(64, ']') + "}",
                                 "t.json");
      }),
      "t.json: a" +
          [] {
            std::string s;
            for (int i = 0; i < 63; ++i) s += "[0]";
            return s;
          }() +
          ": nested more than 64 levels deep");
}

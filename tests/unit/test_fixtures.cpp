// Real runs recorded on the H200 (tests/data/): everything after `measure` is checked on the CPU
// against them. `show` must print exactly what the live run printed; a schema-1 file (an old
// baseline) must still load and show the tables it saved; the notes' figures must follow from
// the saved results; every lesson's result must survive its typed form unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/lessons/info.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "run.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

/// Removes the "sampling": null that the typed form writes for a figure saved before the
/// stopping rule (how a figure was sampled, which such a file does not say): the one key the
/// round trip may add.
void drop_null_sampling(nlohmann::json& j) {
  if (j.is_object()) {
    if (const auto it = j.find("sampling"); it != j.end() && it->is_null()) j.erase(it);
    for (auto& [k, v] : j.items()) drop_null_sampling(v);
  } else if (j.is_array()) {
    for (auto& v : j) drop_null_sampling(v);
  }
}

using gpu_basics::testing::kData;

using gpu_basics::testing::slurp;

nlohmann::json load_json(const std::string& path) {
  return nlohmann::json::parse(slurp(path));
}

int show(const std::string& file, std::string* out, std::string* err) {
  cli::options o;
  o.command = "show";
  o.input_path = file;
  std::ostringstream os, es;
  const int rc = cli::run(o, os, es);
  *out = os.str();
  *err = es.str();
  return rc;
}

/// All notes of one lesson's rendered tables, one per line.
std::string notes_of(const run_record& rec, const std::string& lesson) {
  std::string all;
  for (const auto& rep : render(rec))
    if (rep.lesson == lesson)
      for (const auto& t : rep.tables)
        for (const auto& n : t.notes) all += n + "\n";
  return all;
}

bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  }
  return a == b;
}

}  // namespace

TEST(Fixtures, ShowPrintsExactlyWhatTheLiveRunOnTheH200Printed) {
  std::string out, err;
  ASSERT_EQ(show(kData + "h200_all.json", &out, &err), cli::exit_ok) << err;
  EXPECT_TRUE(err.empty()) << err;
  const std::string live = slurp(kData + "h200_all.txt");
  ASSERT_FALSE(live.empty());
  EXPECT_EQ(out, live);
}

TEST(Fixtures, SchemaOneBaselineShowsTheTablesItSaved) {
  const nlohmann::json v1 = load_json(kData + "h200_all_v1.json");
  ASSERT_EQ(v1["schema_version"], 1);
  const run_record rec = load_record(kData + "h200_all_v1.json");
  ASSERT_EQ(rec.results.size(), 4u);  // info, memory, transfer, profile
  std::map<std::string, nlohmann::json> now;
  for (const auto& rep : render(rec))
    for (const auto& t : rep.tables) now[rep.lesson + "." + t.id] = presentation::to_json(t);
  // The run had one GPU. Since it was saved, what one GPU cannot measure is left out: the
  // peer-access-off matrices (the same copy within the GPU) and NCCL's bus bandwidth (one rank
  // crosses no link); a note says why. Every other table, column and figure is as saved.
  const std::set<std::string> one_gpu_left_out = {"transfer.p2p_bandwidth_peer_off",
                                                  "transfer.p2p_bidirectional_peer_off"};
  const auto bus_column = [](const std::string& key) {
    return key.size() > 16 && key.substr(key.size() - 16) == "_bus_bytes_per_s";
  };
  for (const auto& saved : v1["tables"]) {
    const std::string id = saved["id"];
    SCOPED_TRACE(id);
    if (one_gpu_left_out.count(id)) {
      EXPECT_FALSE(now.count(id));
      continue;
    }
    ASSERT_TRUE(now.count(id));
    const auto& t = now[id];
    nlohmann::json columns = nlohmann::json::array();
    for (const auto& c : saved["columns"])
      if (id != "transfer.nccl" || !bus_column(c.get<std::string>())) columns.push_back(c);
    if (id == "transfer.nccl") {
      EXPECT_LT(columns.size(), saved["columns"].size());
      EXPECT_EQ(t["title"],
                "NCCL 2.28.3 collectives on 1 rank, float32 (median of 20; algbw = bytes / time)");
    } else {
      EXPECT_EQ(t["title"], saved["title"]);
    }
    EXPECT_EQ(t["columns"], columns);
    ASSERT_EQ(t["rows"].size(), saved["rows"].size());
    for (std::size_t r = 0; r < saved["rows"].size(); ++r)
      for (const auto& [key, value] : saved["rows"][r].items()) {
        if (id == "transfer.nccl" && bus_column(key)) continue;
        EXPECT_TRUE(same_value(t["rows"][r][key], value))
            << "row " << r << " " << key << ": " << t["rows"][r][key] << " vs " << value;
      }
  }
  // What is no longer shown is still read: the peer-access-off figures are in the result.
  for (const auto& [name, j] : rec.results)
    if (name == "transfer") {
      const auto t = result_from_json<transfer_result>(j, "transfer");
      ASSERT_TRUE(t.multi_gpu);
      EXPECT_TRUE(t.multi_gpu->peer.cells.at(0).at(0).uni_peer_off_bytes_per_s);
    }
  // And the CLI shows it with exit 0.
  std::string out, err;
  EXPECT_EQ(show(kData + "h200_all_v1.json", &out, &err), cli::exit_ok) << err;
  EXPECT_NE(out.find("==== gpu-basics profile ===="), std::string::npos);
}

TEST(Fixtures, EveryResultSurvivesItsTypedForm) {
  const nlohmann::json j = load_json(kData + "h200_all.json");
  const auto& r = j.at("results");
  const auto check = [&](auto typed, const char* name) {
    SCOPED_TRACE(name);
    const nlohmann::json saved = r.at(name);
    typed = saved.get<decltype(typed)>();
    nlohmann::json again = typed;
    drop_null_sampling(again);
    EXPECT_EQ(again, saved);  // nothing dropped, nothing added
    EXPECT_EQ(nlohmann::json::parse(again.dump()).get<decltype(typed)>(), typed);
  };
  check(info_result{}, "info");
  check(memory_result{}, "memory");
  check(transfer_result{}, "transfer");
  check(profile_result{}, "profile");
}

TEST(Fixtures, NotesStateFiguresComputedFromTheSavedResults) {
  const run_record rec = load_record(kData + "h200_all.json");
  const nlohmann::json doc = load_json(kData + "h200_all.json");
  const nlohmann::json& results = doc.at("results");

  // memory: pinned vs pageable upload
  const auto& pinned = results["memory"]["pinned"];
  const double ratio = pinned["pinned_h2d_bytes_per_s"].get<double>() /
                       pinned["pageable_h2d_bytes_per_s"].get<double>();
  EXPECT_NE(notes_of(rec, "memory").find(fmt::format("H2D runs {:.1f}x slower here", ratio)),
            std::string::npos)
      << notes_of(rec, "memory");

  // profile: fp16/bf16 against the datasheet peak of the GPU the run names
  const device_facts facts = facts_of(rec);
  ASSERT_TRUE(facts.datasheet);
  std::vector<double> pct;
  for (const auto& run : results["profile"]["matmul"]["runs"])
    if (run["precision"] == "fp16" || run["precision"] == "bf16")
      pct.push_back(100.0 * run["flops_per_s"]["median"].get<double>() /
                    facts.datasheet->bf16_flops);
  ASSERT_EQ(pct.size(), 2u);
  const std::string share = fmt::format("{:.1f}-{:.1f}% of the tensor-core peak here",
                                        std::min(pct[0], pct[1]), std::max(pct[0], pct[1]));
  EXPECT_NE(notes_of(rec, "profile").find(share), std::string::npos) << notes_of(rec, "profile");

  // transfer: both directions at once against one H2D stream
  const auto& streams = results["transfer"]["streams"];
  const std::string text = notes_of(rec, "transfer");
  const auto at = text.find("x the bytes per second of one H2D stream here");
  ASSERT_NE(at, std::string::npos) << text;
  const auto from = text.rfind(' ', at);
  const double stated = std::stod(text.substr(from + 1, at - from - 1));
  EXPECT_GT(stated, 1.0);
  EXPECT_LT(stated, 2.0);  // one link each way: at most twice one direction
  EXPECT_TRUE(streams.contains("bidirectional"));
}

TEST(Fixtures, AForeignJsonFileIsOneClearErrorAndExitTwo) {
  std::string out, err;
  EXPECT_EQ(show(std::string(GPU_BASICS_SOURCE_DIR) + "/CMakePresets.json", &out, &err),
            cli::exit_usage);
  EXPECT_NE(err.find("not a gpu-basics results file"), std::string::npos) << err;
  EXPECT_TRUE(out.empty());
}

// ---- hostile results files: every one is one clear line, exit 2, naming the file and the key --

namespace {

/// h200_all.json with `edit` applied, written to a file of its own; returns its path.
std::string edited_fixture(const std::string& name,
                           const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = load_json(kData + "h200_all.json");
  edit(j);
  const std::string path = ::testing::TempDir() + "gb_hostile_" + name + ".json";
  std::ofstream(path, std::ios::binary) << j.dump();
  return path;
}

/// A file of `text`; returns its path.
std::string text_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "gb_hostile_" + name + ".json";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

/// Whether `err` is one line.
bool one_line(const std::string& err) {
  return !err.empty() && err.find('\n') == err.size() - 1;
}

}  // namespace

TEST(Fixtures, DeepNestingIsRefusedWhileParsing) {
  // 100000 levels in "environment": without a depth cap, copying or printing the tree
  // overflows the stack (SIGSEGV).
  std::string text = slurp(kData + "h200_all.json");
  const std::string env = "\"environment\": {";
  ASSERT_NE(text.find(env), std::string::npos);
  text.insert(text.find(env) + env.size(),
              "\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  const std::string path = text_file("deep", text);
  std::string out, err;
  EXPECT_EQ(show(path, &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("gb_hostile_deep.json: environment.deep[0][0]"), std::string::npos) << err;
  EXPECT_NE(err.find("nested more than 64 levels deep"), std::string::npos) << err;
  EXPECT_TRUE(one_line(err)) << err;
  // The committed runs nest 10 levels: far below the cap.
  EXPECT_NO_THROW((void)load_record(kData + "h200_all.json"));
  EXPECT_NO_THROW((void)parse_results_json(std::string(64, '[') + std::string(64, ']'), "x"));
  EXPECT_THROW((void)parse_results_json(std::string(65, '[') + std::string(65, ']'), "x"),
               format_error);
}

TEST(Fixtures, ANumberOutsideDoubleRangeNamesItsKey) {
  std::string text = slurp(kData + "h200_all.json");
  const std::string key = "\"schema_version\": 2";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "\"schema_version\": 2, \"huge\": {\"x\": [1, 1e400]}");
  std::string out, err;
  EXPECT_EQ(show(text_file("huge", text), &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("gb_hostile_huge.json: huge.x[1]: a number outside the range of a double"),
            std::string::npos)
      << err;
  EXPECT_TRUE(one_line(err)) << err;
}

TEST(Fixtures, LongStringsAreRefusedAndMessagesCut) {
  const std::string path = edited_fixture(
      "long", [](nlohmann::json& j) { j["errors"]["memory"] = std::string(100000, 'x'); });
  std::string out, err;
  EXPECT_EQ(show(path, &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("errors.memory: a string of 100000 bytes; at most 64 KiB"), std::string::npos)
      << err;
  EXPECT_TRUE(one_line(err)) << err;
  // A long message is cut, and says so.
  const std::string line = message_line(std::string(50'000'000, ' '));
  EXPECT_LT(line.size(), 1100u);
  EXPECT_NE(line.find("... (49998976 more characters)"), std::string::npos);
  // Not JSON: the parser's message quotes the input; it is cut too.
  const std::string spaces = text_file("spaces", "{\"a\": \"" + std::string(1'000'000, ' '));
  EXPECT_EQ(show(spaces, &out, &err), cli::exit_usage);
  EXPECT_LT(err.size(), 1200u);
  EXPECT_NE(err.find("not JSON at line 1"), std::string::npos) << err;
}

TEST(Fixtures, IntegersOutsideTheirRangeAreRefused) {
  std::string out, err;
  const std::string version =
      edited_fixture("version", [](nlohmann::json& j) { j["schema_version"] = 4294967298ull; });
  EXPECT_EQ(show(version, &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("schema_version 4294967298 is not one this build reads"), std::string::npos)
      << err;
  const std::string device = edited_fixture(
      "device", [](nlohmann::json& j) { j["environment"]["config"]["device"] = 4294967296ull; });
  EXPECT_EQ(show(device, &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("gb_hostile_device.json: environment.config.device: expected a device index"),
            std::string::npos)
      << err;
  EXPECT_TRUE(one_line(err)) << err;
}

TEST(Fixtures, AResultThatCannotBeReadNamesTheFileAndTheLesson) {
  const std::string path = edited_fixture("null", [](nlohmann::json& j) {
    j["results"]["transfer"] = nlohmann::json::array({nullptr});
  });
  std::string out, err;
  EXPECT_EQ(show(path, &out, &err), cli::exit_usage);
  EXPECT_NE(err.find("gb_hostile_null.json: results.transfer: "), std::string::npos) << err;
  EXPECT_TRUE(one_line(err)) << err;
}

TEST(Fixtures, ControlCharactersFromAFileNeverReachTheTerminal) {
  const std::string path = edited_fixture("escape", [](nlohmann::json& j) {
    j["errors"]["memory"] = "\x1b]0;owned\x07 \x1b[31mred";
    for (auto& g : j["environment"]["gpus"]) g["name"] = "H200\x1b[2J";
  });
  std::string out, err;
  EXPECT_EQ(show(path, &out, &err), cli::exit_ok);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << err;
  EXPECT_EQ(err.find('\x07'), std::string::npos) << err;
  EXPECT_NE(err.find("\\x1b]0;owned\\x07"), std::string::npos) << err;
  // A file name is escaped too.
  const std::string named = text_file("name\x1b[31m", "{}");
  EXPECT_EQ(show(named, &out, &err), cli::exit_usage);
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << err;
}

TEST(Fixtures, AnOutputThatIsAnInputOrAnotherOutputIsRefused) {
  const std::string input = edited_fixture("input", [](nlohmann::json&) {});
  const std::string before = slurp(input);
  cli::options o;
  o.command = "show";
  o.input_path = input;
  o.json_path = input;
  std::ostringstream os, es;
  EXPECT_EQ(cli::run(o, os, es), cli::exit_usage);
  EXPECT_NE(es.str().find("refusing to overwrite an input"), std::string::npos) << es.str();
  EXPECT_EQ(slurp(input), before);
  // The same new file twice, spelled differently.
  const std::string out = ::testing::TempDir() + "gb_hostile_twice.out";
  std::filesystem::remove(out);
  o.json_path = out;
  o.csv_path = ::testing::TempDir() + "./gb_hostile_twice.out";
  std::ostringstream os2, es2;
  EXPECT_EQ(cli::run(o, os2, es2), cli::exit_usage);
  EXPECT_NE(es2.str().find("--json and --csv name the same file"), std::string::npos) << es2.str();
  EXPECT_FALSE(std::filesystem::exists(out));
  // report -o IN.json
  cli::options r;
  r.command = "report";
  r.input_paths = {input};
  r.html_path = input;
  std::ostringstream os3, es3;
  EXPECT_EQ(cli::run(r, os3, es3), cli::exit_usage);
  EXPECT_EQ(slurp(input), before);
}

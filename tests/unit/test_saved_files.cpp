// `show` and `report` of the files advise and replay write (apps/gpu-basics/saved.hpp), the
// replay file's reader, and what they do with hostile files and a full disk.
#include <cerrno>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/replay_json.hpp"

#include "cli.hpp"
#include "exit_codes.hpp"
#include "run.hpp"
#include "snapshot_test_util.hpp"

using namespace snapshot_test;
using nlohmann::json;

namespace {

/// A stream every write to which fails, as std::cout does on /dev/full.
class full_device : public std::streambuf {
 protected:
  int overflow(int) override { return traits_type::eof(); }
  std::streamsize xsputn(const char*, std::streamsize) override { return 0; }
};

struct cli_result {
  int code = -1;
  std::string out, err;
};

/// `gpu-basics ARGS...` parsed and run as main() runs it; stdout to `out` when given.
cli_result cli(std::vector<std::string> args, std::ostream* out = nullptr) {
  args.insert(args.begin(), "gpu-basics");
  std::ostringstream o, e;
  cli_result r;
  const auto parsed = gb::cli::parse(args, o, e);
  r.code = parsed.opts ? gb::cli::run(*parsed.opts, out ? *out : o, e) : parsed.exit_code;
  r.out = o.str();
  r.err = e.str();
  return r;
}

const std::string kSmall = kData + "/snapshot_small.pickle";
const std::string kH200 = kData + "/h200_torch_snapshot.pickle";

/// The JSON file at `p`, changed by `edit`, written to `to`.
void edit_json(const std::filesystem::path& p, const std::filesystem::path& to,
               const std::function<void(json&)>& edit) {
  json j = json::parse(read_bytes(p));
  edit(j);
  write_bytes(to, j.dump());
}

/// A command that must fail with exit 2, one line on stderr holding `message`, nothing on
/// stdout and no `output` left.
void expect_refused(const std::vector<std::string>& args, const std::string& message,
                    const std::filesystem::path& output) {
  const auto r = cli(args);
  EXPECT_EQ(r.code, gb::cli::exit_usage) << args[0] << " " << args[1] << ": " << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(std::filesystem::exists(output)) << output;
}

}  // namespace

TEST(SavedFiles, ShowOfAnAdviceFilePrintsWhatAdvisePrinted) {
  const auto dir = scratch("saved_show_advice");
  const std::string a = (dir / "a.json").string();
  const auto advised = cli({"advise", kH200, "--fit", "200MiB", "--json", a});
  ASSERT_EQ(advised.code, gb::cli::exit_ok) << advised.err;
  const auto shown = cli({"show", a});
  ASSERT_EQ(shown.code, gb::cli::exit_ok) << shown.err;
  EXPECT_EQ(shown.err, "");
  EXPECT_NE(shown.out.find("Use with PyTorch"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out, advised.out);
  // --json - re-emits the file as advise wrote it; --json FILE and --csv write it and the tables.
  const auto again = cli({"show", a, "--json", "-"});
  ASSERT_EQ(again.code, gb::cli::exit_ok) << again.err;
  EXPECT_EQ(again.out, read_bytes(a));
  const auto files =
      cli({"show", a, "--json", (dir / "b.json").string(), "--csv", (dir / "t.csv").string()});
  ASSERT_EQ(files.code, gb::cli::exit_ok) << files.err;
  EXPECT_EQ(read_bytes(dir / "b.json"), read_bytes(a));
  EXPECT_TRUE(std::filesystem::exists(dir / "t.advice.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir / "t.policies.csv"));
}

TEST(SavedFiles, ShowOfAReplayFilePrintsWhatReplayPrinted) {
  const auto dir = scratch("saved_show_replay");
  const std::string r = (dir / "r.json").string();
  const auto replayed = cli({"replay", kSmall, "--policy", "max_split_size_mb:32", "--json", r});
  ASSERT_EQ(replayed.code, gb::cli::exit_ok) << replayed.err;
  const auto shown = cli({"show", r});
  ASSERT_EQ(shown.code, gb::cli::exit_ok) << shown.err;
  EXPECT_NE(shown.out.find("| PyTorch (recorded)"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out, replayed.out);
  const auto again = cli({"show", r, "--json", "-"});
  ASSERT_EQ(again.code, gb::cli::exit_ok) << again.err;
  EXPECT_EQ(again.out, read_bytes(r));
}

TEST(SavedFiles, AConfNoParserKnowsIsShownNotThrown) {
  // A replay file's policy conf is a string from the file: one this build cannot read (the
  // advice fuzzer's find, "max_sphit_size_mb") is printed as it is, with no note built on it;
  // a collector without a fraction gets its note.
  const auto dir = scratch("saved_bad_conf");
  const std::string r = (dir / "r.json").string();
  ASSERT_EQ(
      cli({"replay", kSmall, "--policy", "garbage_collection_threshold:0.7", "--json", r}).code,
      gb::cli::exit_ok);
  const auto bad = dir / "bad.json";
  edit_json(r, bad, [](json& j) { j["policies"][1]["conf"] = "max_sphit_size_mb:64"; });
  const auto shown = cli({"show", bad.string()});
  EXPECT_EQ(shown.code, gb::cli::exit_ok) << shown.err;
  EXPECT_NE(shown.out.find("max_sphit_size_mb:64"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("garbage_collection_threshold:0.7: garbage_collection_threshold acts "
                           "only under a memory fraction"),
            std::string::npos)
      << shown.out;
  EXPECT_FALSE(gb::collects_without_fraction("max_sphit_size_mb:64"));
  EXPECT_TRUE(gb::collects_without_fraction("garbage_collection_threshold:0.7"));
  EXPECT_FALSE(gb::collects_without_fraction(
      "garbage_collection_threshold:0.7,per_process_memory_fraction:0.5"));
}

TEST(SavedFiles, ReplayJsonReadsBackToTheSameFile) {
  const auto dir = scratch("saved_replay_roundtrip");
  ASSERT_EQ(cli({"replay", kH200, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const json j = json::parse(read_bytes(dir / "r.json"));
  EXPECT_EQ(j["schema_version"], gb::kReplaySchemaVersion);
  const gb::replay_report back = gb::replay_from_json(j, "r.json");
  EXPECT_EQ(gb::to_json(back), j);
  ASSERT_FALSE(back.policies.empty());
  EXPECT_EQ(back.policies[0].conf, "");
  ASSERT_TRUE(back.policies[0].result);
  EXPECT_EQ(back.policies[0].result->peak_reserved, j["policies"][0]["peak_reserved_bytes"]);
}

TEST(SavedFiles, SchemaVersionsAreChecked) {
  const auto dir = scratch("saved_schema");
  ASSERT_EQ(cli({"replay", kSmall, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  ASSERT_EQ(cli({"advise", kSmall, "--json", (dir / "a.json").string()}).code, gb::cli::exit_ok);
  edit_json(dir / "r.json", dir / "old.json", [](json& j) { j.erase("schema_version"); });
  expect_refused({"show", (dir / "old.json").string()},
                 "old.json: a replay file without a schema_version, from a gpu-basics that "
                 "replayed garbage_collection_threshold under a limit PyTorch never sets: run "
                 "replay again",
                 dir / "none");
  edit_json(dir / "r.json", dir / "new.json", [](json& j) { j["schema_version"] = 2; });
  expect_refused({"show", (dir / "new.json").string()},
                 "new.json: schema_version 2 is not one this build reads (1 to 1); a newer "
                 "gpu-basics wrote it",
                 dir / "none");
  edit_json(dir / "r.json", dir / "zero.json", [](json& j) { j["schema_version"] = 0; });
  expect_refused({"report", (dir / "zero.json").string(), "-o", (dir / "p.html").string()},
                 "zero.json: schema_version 0 is not one this build reads", dir / "p.html");
  // An advice file of a newer schema, through show and report alike.
  int newer = 0;
  edit_json(dir / "a.json", dir / "newer.json", [&](json& j) {
    newer = j["schema_version"].get<int>() + 1;
    j["schema_version"] = newer;
  });
  const std::string message = "newer.json: an advice file of schema version " +
                              std::to_string(newer) + ", where this gpu-basics reads " +
                              std::to_string(newer - 1);
  expect_refused({"show", (dir / "newer.json").string()}, message, dir / "none");
  expect_refused({"report", (dir / "newer.json").string(), "-o", (dir / "p.html").string()},
                 message, dir / "p.html");
}

TEST(SavedFiles, ReportDrawsAReplayFile) {
  const auto dir = scratch("saved_report_replay");
  ASSERT_EQ(cli({"replay", kH200, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const auto r = cli({"report", (dir / "r.json").string(), "-o", (dir / "r.html").string()});
  ASSERT_EQ(r.code, gb::cli::exit_ok) << r.err;
  EXPECT_NE(r.out.find("the replay of "), std::string::npos) << r.out;
  const std::string html = read_bytes(dir / "r.html");
  EXPECT_NE(html.find("data-chart=\"replay-peaks\""), std::string::npos);
  EXPECT_NE(html.find("PyTorch (recorded): "), std::string::npos);  // the recorded peak's line
  EXPECT_NE(html.find("peak reserved (replayed)"), std::string::npos);
  EXPECT_NE(html.find("max_split_size_mb:64"), std::string::npos);  // a bar per policy
  EXPECT_EQ(html.find("<script src="), std::string::npos);          // one file, as the others
}

TEST(SavedFiles, ReportOfAnAdviceOrReplayFileWithOthersIsOneClearError) {
  const auto dir = scratch("saved_report_mix");
  ASSERT_EQ(cli({"advise", kSmall, "--json", (dir / "a.json").string()}).code, gb::cli::exit_ok);
  ASSERT_EQ(cli({"replay", kSmall, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const std::string results = kData + "/h200_all.json", page = (dir / "p.html").string();
  expect_refused({"report", (dir / "a.json").string(), results, "-o", page},
                 (dir / "a.json").string() +
                     " is an advice file (advise --json); report draws such a file alone, not "
                     "with other files",
                 page);
  expect_refused({"report", results, (dir / "r.json").string(), "-o", page},
                 (dir / "r.json").string() + " is a replay file (replay --json); report draws",
                 page);
  expect_refused({"report", (dir / "a.json").string(), (dir / "a.json").string(), "-o", page},
                 "is an advice file", page);
}

TEST(SavedFiles, HostileAdviceValuesAreRefusedNamingTheirKeyPath) {
  const auto dir = scratch("saved_hostile_advice");
  ASSERT_EQ(cli({"advise", kH200, "--fit", "200MiB", "--json", (dir / "a.json").string()}).code,
            gb::cli::exit_ok);
  const std::string page = (dir / "p.html").string();
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["defaults"]["smallest_limit_bytes"] = -1e308; },
       "defaults.smallest_limit_bytes: expected an integer in 0..18446744073709551615, got "
       "-1e+308"},
      {[](json& j) { j["policies"][3]["peak_reserved_bytes"] = "x"; },
       "policies[3].peak_reserved_bytes: expected an integer, got \"x\""},
      {[](json& j) { j["policies"][3]["fits"][0]["limit_bytes"] = json::array(); },
       "policies[3].fits[0].limit_bytes: expected an integer, got a list"},
      {[](json& j) { j["recommendation"]["curve"] = 5; },
       "recommendation.curve: expected an object"},
      {[](json& j) { j["defaults"]["smallest_limit_bytes"] = 18446744073709551615ull; },
       "defaults.smallest_limit_bytes: expected at most 9223372036854775807 bytes, got "
       "18446744073709551615"},  // once printed as "-0"
      {[](json& j) { j["policies"][0]["peak_reserved_bytes"] = 1e19; },
       "policies[0].peak_reserved_bytes: expected at most 9223372036854775807 bytes"},
      {[](json& j) { j["defaults"]["curve"]["reserved_bytes"][0] = 1ull << 63; },
       "defaults.curve.reserved_bytes[0]: expected at most 9223372036854775807 bytes"},
  };
  for (const auto& [edit, message] : cases) {
    edit_json(dir / "a.json", dir / "bad.json", edit);
    expect_refused({"show", (dir / "bad.json").string()}, message, dir / "none");
    expect_refused({"report", (dir / "bad.json").string(), "-o", page}, message, page);
  }
}

TEST(SavedFiles, HostileReplayValuesAreRefusedNamingTheirKeyPath) {
  const auto dir = scratch("saved_hostile_replay");
  ASSERT_EQ(cli({"replay", kH200, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const std::string page = (dir / "p.html").string();
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["policies"][3]["peak_reserved_bytes"] = "x"; },
       "policies[3].peak_reserved_bytes: expected an integer, got \"x\""},
      {[](json& j) { j["recorded"]["peak_reserved_bytes"] = -1e308; },
       "recorded.peak_reserved_bytes: expected an integer in 0..18446744073709551615"},
      {[](json& j) { j["policies"][1]["peak_reserved_bytes"] = 18446744073709551615ull; },
       "policies[1].peak_reserved_bytes: expected at most 9223372036854775807 bytes"},
      {[](json& j) { j["policies"][2]["peak_allocated_bytes"] = 1ull << 50; },
       "policies[2].peak_allocated_bytes: above peak_reserved_bytes"},
      {[](json& j) { j["policies"][2]["fragmentation_at_peak"] = 7; },
       "policies[2].fragmentation_at_peak: expected a fraction in 0..1"},
      {[](json& j) { j["policies"][2].erase("seconds"); }, "policies[2].seconds: missing"},
      {[](json& j) { j["policies"][2]["conf"] = j["policies"][1]["conf"]; },
       "policies[2].conf: a policy listed twice"},
      {[](json& j) { j["policies"] = json::array(); }, "policies: expected a list that starts"},
      {[](json& j) { j["device"] = -3; }, "device: expected a device index of 0 or more"},
      {[](json& j) { j["schema_version"] = "1"; }, "schema_version: expected an integer"},
  };
  for (const auto& [edit, message] : cases) {
    edit_json(dir / "r.json", dir / "bad.json", edit);
    expect_refused({"show", (dir / "bad.json").string()},
                   "bad.json: not a replay file that can be read: " + message, dir / "none");
    expect_refused({"report", (dir / "bad.json").string(), "-o", page}, message, page);
  }
}

TEST(SavedFiles, ALargeAdviceFileIsRefusedBeforeItIsRead) {
  const auto dir = scratch("saved_large");
  // 150 MB, sparse: once drawn to exhaustion (std::bad_alloc, exit 134); now refused by its size.
  const auto big = dir / "big.json";
  write_bytes(big, "{\n  \"command\": \"advise\",\n  \"defaults\": [");
  std::filesystem::resize_file(big, 150'000'000);
  const std::string page = (dir / "p.html").string();
  const std::string message =
      "big.json: larger than 32 MiB, the limit for a saved advice (GPU_BASICS_MAX_INPUT_MIB "
      "raises it)";
  expect_refused({"report", big.string(), "-o", page}, message, page);
  expect_refused({"show", big.string()}, message, dir / "none");
  // Its "command" beyond the first bytes: read as JSON, then refused by its kind's limit.
  std::string padded = "{\"padding\": [";
  const std::string chunk(60000, 'x');
  for (int i = 0; i < 600; ++i) padded += (i ? ",\"" : "\"") + chunk + "\"";
  padded += "], \"command\": \"replay\"}";
  write_bytes(dir / "late.json", padded);
  expect_refused({"report", (dir / "late.json").string(), "-o", page},
                 "late.json: larger than 32 MiB, the limit for a saved replay", page);
}

TEST(SavedFiles, AFullStdoutIsAnIoErrorNotASuccess) {
  const auto dir = scratch("saved_full");
  ASSERT_EQ(cli({"advise", kSmall, "--json", (dir / "a.json").string()}).code, gb::cli::exit_ok);
  ASSERT_EQ(cli({"replay", kSmall, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const std::vector<std::vector<std::string>> commands = {
      {"show", (dir / "a.json").string(), "--json", "-"},
      {"show", (dir / "a.json").string()},
      {"show", (dir / "r.json").string()},
      {"show", kData + "/h200_all.json"},
      {"replay", kSmall},
      {"replay", kSmall, "--json", "-"},
      {"advise", kSmall, "--json", "-"},
      {"show", (dir / "r.json").string(), "--json", (dir / "again.json").string()},
      {"show", kData + "/h200_all.json", "--json", (dir / "lesson.json").string()},
      {"advise", kSmall, "--html", (dir / "page.html").string()},
  };
  for (const auto& args : commands) {
    full_device device;
    std::ostream full(&device);
    const auto r = cli(args, &full);
    EXPECT_EQ(r.code, gb::cli::exit_io) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_EQ(r.err,
              "gpu-basics: cannot write to the standard output (a full disk, or a closed "
              "pipe?)\n");
  }
  // The tables were lost: the files after them are not written.
  EXPECT_FALSE(std::filesystem::exists(dir / "again.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "lesson.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "page.html"));
}

TEST(SavedFiles, AFullDeviceAmongTheOutputsLeavesNoneWritten) {
  const auto dir = scratch("saved_dev_full");
  const auto r =
      cli({"advise", kSmall, "--json", "/dev/full", "--html", (dir / "p.html").string()});
  EXPECT_EQ(r.code, gb::cli::exit_io) << r.err;
  EXPECT_NE(r.err.find("cannot write /dev/full: "), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "p.html"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // no temporary left beside it either
  ASSERT_EQ(cli({"replay", kSmall, "--json", (dir / "r.json").string()}).code, gb::cli::exit_ok);
  const auto s = cli({"show", (dir / "r.json").string(), "--json", "/dev/full", "--csv",
                      (dir / "t.csv").string()});
  EXPECT_EQ(s.code, gb::cli::exit_io) << s.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "t.csv"));
}

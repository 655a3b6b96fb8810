#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/environment.hpp"
#include "run.hpp"

using namespace gpu_basics;

namespace {
cli::parse_result parse(std::vector<std::string> args, std::string* out = nullptr,
                        std::string* err = nullptr) {
  args.insert(args.begin(), "gpu-basics");
  std::ostringstream o, e;
  auto r = cli::parse(args, o, e);
  if (out) *out = o.str();
  if (err) *err = e.str();
  return r;
}
}  // namespace

TEST(Cli, EverySubcommandParses) {
  for (const auto& c : cli::commands()) {
    const auto r = c == "show"                      ? parse({c, "run.json"})
                   : c == "report"                  ? parse({c, "run.json", "-o", "r.html"})
                   : c == "compare"                 ? parse({c, "a.json", "b.json"})
                   : c == "replay" || c == "advise" ? parse({c, "snapshot.pickle"})
                   : c == "preflight" ? parse({c, "a.pickle", "b.pickle", "--batches", "2,4"})
                                      : parse({c});
    ASSERT_TRUE(r.opts) << c;
    EXPECT_EQ(r.opts->command, c);
    EXPECT_TRUE(r.opts->config_path.empty());
  }
}

TEST(Cli, OptionsAfterTheSubcommand) {
  const auto r =
      parse({"transfer", "--config", "x.yaml", "--set", "transfer.num_streams=2", "-s", "device=1",
             "--log-level", "DEBUG", "--json", "out.json", "--csv", "t.csv"});
  ASSERT_TRUE(r.opts);
  EXPECT_EQ(r.opts->config_path, "x.yaml");
  EXPECT_EQ(r.opts->overrides, (std::vector<std::string>{"transfer.num_streams=2", "device=1"}));
  EXPECT_EQ(r.opts->log_level, "DEBUG");
  EXPECT_EQ(r.opts->json_path, "out.json");
  EXPECT_EQ(r.opts->csv_path, "t.csv");
}

TEST(Cli, HelpExitsZeroAndListsOptions) {
  std::string out;
  const auto r = parse({"memory", "--help"}, &out);
  EXPECT_FALSE(r.opts);
  EXPECT_EQ(r.exit_code, cli::exit_ok);
  EXPECT_NE(out.find("--config"), std::string::npos);
  EXPECT_NE(out.find("--set"), std::string::npos);
  EXPECT_NE(out.find("--json"), std::string::npos);
}

TEST(Cli, VersionIsTheBuildsOwn) {
  std::string out;
  const auto r = parse({"--version"}, &out);
  EXPECT_FALSE(r.opts);
  EXPECT_EQ(r.exit_code, cli::exit_ok);
  EXPECT_EQ(out, "gpu-basics " + std::string(gpu_basics_version()) + " (" +
                     std::string(gpu_basics_git_revision()) + ")\n");
  EXPECT_FALSE(gpu_basics_version().empty());
}

TEST(Cli, TheVersionIsTheOneInTheVersionFile) {
  std::ifstream in(std::string(GPU_BASICS_SOURCE_DIR) + "/VERSION");
  std::string version;
  ASSERT_TRUE(std::getline(in, version));
  EXPECT_EQ(gpu_basics_version(), version);
}

// Note [help for people] (cli.cpp): no CLI11 type name or validator text in any help.
TEST(Cli, HelpNamesValuesInWordsNotInTheParsersTypes) {
  static const std::regex artefact(
      R"((FLOAT|TEXT|INT|UINT|BOOLEAN|NUMBER|ENUM)\b|FLOAT:|TEXT:|INT:| in \[|Excludes:|Needs:)");
  std::vector<std::vector<std::string>> helps{{"--help"}};
  for (const auto& c : cli::commands()) helps.push_back({c, "--help"});
  for (const auto& args : helps) {
    std::string out;
    const auto r = parse(args, &out);
    ASSERT_EQ(r.exit_code, cli::exit_ok) << args[0];
    std::smatch m;
    EXPECT_FALSE(std::regex_search(out, m, artefact))
        << "gpu-basics " << args[0] << " --help shows '" << m.str() << "':\n"
        << out;
  }
  // And each value is named, e.g. the sizes of advise and the threshold of compare.
  std::string out;
  parse({"advise", "--help"}, &out);
  EXPECT_NE(out.find("--fit SIZE ..."), std::string::npos) << out;
  EXPECT_NE(out.find("--device-memory SIZE"), std::string::npos) << out;
  parse({"compare", "--help"}, &out);
  EXPECT_NE(out.find("--threshold FRACTION"), std::string::npos) << out;
  parse({"memory", "--help"}, &out);
  EXPECT_NE(out.find("--set KEY=VALUE ..."), std::string::npos) << out;
  EXPECT_NE(out.find("--json PATH"), std::string::npos) << out;
}

TEST(Cli, AThresholdOutsideZeroToPointNineNineIsNamed) {
  std::string err;
  EXPECT_EQ(parse({"compare", "a.json", "b.json", "--threshold", "1.5"}, nullptr, &err).exit_code,
            cli::exit_usage);
  EXPECT_EQ(err,
            "gpu-basics: --threshold: expected a fraction from 0 to 0.99, got \"1.5\" (see "
            "'gpu-basics --help')\n");
  EXPECT_TRUE(parse({"compare", "a.json", "b.json", "--threshold", "0.99"}).opts);
  EXPECT_TRUE(parse({"compare", "a.json", "b.json", "--threshold", "0"}).opts);
}

TEST(Cli, ErrorsExitTwoWithOneMessage) {
  std::string err;
  for (const std::vector<std::string>& args : {std::vector<std::string>{},
                                               {"frobnicate"},
                                               {"info", "--bogus"},
                                               {"info", "--log-level", "loud"},
                                               {"info", "--config"},
                                               {"info", "--csv", "-"}}) {
    const auto r = parse(args, nullptr, &err);
    EXPECT_FALSE(r.opts);
    EXPECT_EQ(r.exit_code, cli::exit_usage) << (args.empty() ? "" : args[0]);
    EXPECT_EQ(err.rfind("gpu-basics: ", 0), 0u) << err;
  }
}

TEST(Cli, AThresholdThatIsNotANumberIsAUsageError) {
  for (const char* bad : {"nan", "NaN", "inf", "-nan"}) {
    std::string err;
    const auto c = parse({"compare", "a.json", "b.json", "--threshold", bad}, nullptr, &err);
    EXPECT_FALSE(c.opts) << bad;
    EXPECT_EQ(c.exit_code, cli::exit_usage) << bad;
    EXPECT_NE(err.find("--threshold"), std::string::npos) << err;
    EXPECT_FALSE(
        parse({"check", "--from", "a.json", "--baseline", "b.json", "--threshold", bad}).opts)
        << bad;
  }
  EXPECT_TRUE(parse({"compare", "a.json", "b.json", "--threshold", "0.05"}).opts);
}

TEST(Cli, CommandsComeFromTheRegistry) {
  EXPECT_EQ(cli::commands(), (std::vector<std::string>{
                                 "info", "memory", "transfer", "profile", "unified", "check", "all",
                                 "show", "report", "compare", "replay", "advise", "preflight"}));
  std::string out;
  (void)parse({"--help"}, &out);
  for (const auto& c : cli::commands()) EXPECT_NE(out.find(c), std::string::npos) << c;
}

TEST(Cli, ShowNeedsAFileAndRejectsABadOne) {
  std::string err;
  EXPECT_EQ(parse({"show"}, nullptr, &err).exit_code, cli::exit_usage);
  const auto r = parse({"show", "run.json", "--csv", "t.csv"});
  ASSERT_TRUE(r.opts);
  EXPECT_EQ(r.opts->input_path, "run.json");
  EXPECT_EQ(parse({"show", "run.json", "--set", "device=1"}, nullptr, &err).exit_code,
            cli::exit_usage);
  cli::options o;
  o.command = "show";
  o.input_path = std::string(GPU_BASICS_SOURCE_DIR) + "/CMakeLists.txt";  // not JSON
  std::ostringstream out, e;
  EXPECT_EQ(cli::run(o, out, e), cli::exit_usage);
  const std::string message = e.str();
  EXPECT_NE(message.find("CMakeLists.txt: not JSON"), std::string::npos) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  EXPECT_TRUE(out.str().empty());
  o.input_path = "/nonexistent/run.json";  // unreadable input: usage error too, not "cannot write"
  std::ostringstream out2, e2;
  EXPECT_EQ(cli::run(o, out2, e2), cli::exit_usage);
  EXPECT_NE(e2.str().find("/nonexistent/run.json"), std::string::npos) << e2.str();
}

TEST(Cli, BadConfigIsRejectedBeforeTheGpu) {
  cli::options o;
  o.command = "transfer";
  o.overrides = {"transfer.num_streams=0"};
  std::ostringstream out, err;
  EXPECT_EQ(cli::run(o, out, err), cli::exit_usage);
  EXPECT_EQ(err.str(),
            "gpu-basics: --set: transfer.num_streams: expected an integer in 1..64, got 0\n");
  EXPECT_TRUE(out.str().empty());
}

#include "gpu_basics/profiler/trace_writer.hpp"

TEST(Cli, TraceIsOfferedWhereALessonTracesAndChecksItsPath) {
  for (const char* c : {"memory", "transfer", "profile"}) {
    const auto r = parse({c, "--trace", "t.json"});
    ASSERT_TRUE(r.opts) << c;
    EXPECT_EQ(r.opts->trace_path, "t.json");
  }
  std::string err;
  EXPECT_EQ(parse({"info", "--trace", "t.json"}, nullptr, &err).exit_code, 2);
  EXPECT_EQ(parse({"profile"}).opts->trace_path, std::nullopt);
  EXPECT_EQ(parse({"profile", "--trace", "-"}, nullptr, &err).exit_code, 2);
  EXPECT_NE(err.find("--trace needs a file path"), std::string::npos) << err;
  const auto gz = parse({"profile", "--trace", "t.json.gz"}, nullptr, &err);
  if (trace_writer::gzip_supported()) {
    ASSERT_TRUE(gz.opts);
    EXPECT_EQ(gz.opts->trace_path, "t.json.gz");
  } else {
    EXPECT_EQ(gz.exit_code, 2);
    EXPECT_NE(err.find("no zlib"), std::string::npos) << err;
  }
}

struct usage_case {
  std::vector<std::string> args;
  std::string message;  // the whole line on stderr
};

TEST(Cli, BadArgumentsGetOneLineNamingThem) {
  const usage_case cases[] = {
      {{},
       "gpu-basics: a command is required: one of info, memory, transfer, profile, unified, check, "
       "all, "
       "show, report, compare, replay, advise, preflight "
       "(see 'gpu-basics --help')"},
      {{"bogus"},
       "gpu-basics: unknown command \"bogus\"; expected one of info, memory, transfer, profile, "
       "unified, check, all, show, report, compare, replay, advise, preflight"},
      {{"INFO"}, "gpu-basics: unknown command \"INFO\"; did you mean 'info'?"},
      {{""},
       "gpu-basics: unknown command \"\"; expected one of info, memory, transfer, profile, "
       "unified, check, all, show, report, compare, replay, advise, preflight"},
      {{"--config", "x.yaml", "info"},
       "gpu-basics: \"--config\": options come after the command: gpu-basics <command> [options] "
       "(commands: info, memory, transfer, profile, unified, check, all, show, report, compare, "
       "replay, "
       "advise, preflight)"},
      {{"info", "x.yaml", "y.yaml"},
       "gpu-basics: unexpected arguments: \"x.yaml\" \"y.yaml\" (see 'gpu-basics --help')"},
      {{"info", "--config", ""},
       "gpu-basics: --config: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"info", "--log-level", ""},
       "gpu-basics: --log-level: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"info", "--json", ""},
       "gpu-basics: --json: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"info", "--csv", ""},
       "gpu-basics: --csv: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"info", "--set", ""},
       "gpu-basics: --set: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"profile", "--trace", ""},
       "gpu-basics: --trace: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"show", ""},
       "gpu-basics: results: needs a value, got an empty one (see 'gpu-basics --help')"},
      {{"profile", "--trace", ".gz"},
       "gpu-basics: --trace \".gz\": '.gz' alone is not a file name; give one, e.g. trace.json.gz"},
      {{"profile", "--trace", "out/.gz"},
       "gpu-basics: --trace \"out/.gz\": '.gz' alone is not a file name; give one, e.g. "
       "trace.json.gz"},
      {{"info", "--log-level", "\x1b[31m"},
       "gpu-basics: --log-level: expected one of trace, debug, info, warn, error, got "
       "\"\\x1b[31m\""},
  };
  for (const auto& c : cases) {
    std::string out, err;
    const auto r = parse(c.args, &out, &err);
    EXPECT_FALSE(r.opts);
    EXPECT_EQ(r.exit_code, cli::exit_usage);
    EXPECT_EQ(err, c.message + "\n");
    EXPECT_TRUE(out.empty()) << out;
  }
}

TEST(Cli, NearestWordIgnoresCaseAndFarNames) {
  const std::vector<std::string> names = {"info", "memory", "show"};
  EXPECT_EQ(nearest_word("INFO", names), "info");
  EXPECT_EQ(nearest_word("memroy", names), "memory");
  EXPECT_FALSE(nearest_word("bogus", names).has_value());
  EXPECT_FALSE(nearest_word("info", names).has_value());  // itself: nothing to suggest
  EXPECT_FALSE(nearest_word(std::string(1u << 20, 'x'), names).has_value());
}

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "gpu_basics/core/interrupt.hpp"

namespace {
/// Runs `o` after `signal_number` arrived (handlers installed, so it only set the flag); returns
/// the exit code and stderr. Restores the default actions afterwards.
std::pair<int, std::string> run_after_signal(const cli::options& o, int signal_number) {
  install_interrupt_handlers();
  std::raise(signal_number);
  EXPECT_EQ(interrupt_signal(), signal_number);
  std::ostringstream out, err;
  const int code = cli::run(o, out, err);
  clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return {code, err.str()};
}
}  // namespace

TEST(Cli, ASignalStopsTheRunWithItsExitCodeAndWritesNothing) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "cli_interrupt";
  std::filesystem::remove_all(dir);
  cli::options o;
  o.command = "transfer";  // stopped before the GPU is looked for
  o.json_path = (dir / "run.json").string();
  EXPECT_EQ(run_after_signal(o, SIGTERM),
            std::make_pair(143, std::string("gpu-basics: interrupted (SIGTERM)\n")));
  cli::options show;
  show.command = "show";  // stopped before its outputs are written
  show.input_path = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data/h200_all.json";
  show.json_path = (dir / "again.json").string();
  EXPECT_EQ(run_after_signal(show, SIGINT),
            std::make_pair(130, std::string("gpu-basics: interrupted (SIGINT)\n")));
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_EQ(interrupt_signal(), 0);
  EXPECT_NO_THROW(throw_if_interrupted());
}

TEST(Cli, ASignalStopsReportAndCompareWithItsExitCodeAndWritesNothing) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "cli_interrupt_read";
  std::filesystem::remove_all(dir);
  const std::string data = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data/";
  cli::options cmp;
  cmp.command = "compare";
  cmp.input_paths = {data + "h200_all.json", data + "h200_all_b.json"};
  cmp.json_path = (dir / "compare.json").string();
  EXPECT_EQ(run_after_signal(cmp, SIGINT),
            std::make_pair(130, std::string("gpu-basics: interrupted (SIGINT)\n")));
  cmp.fleet = true;
  EXPECT_EQ(run_after_signal(cmp, SIGTERM),
            std::make_pair(143, std::string("gpu-basics: interrupted (SIGTERM)\n")));
  cli::options rep;
  rep.command = "report";
  rep.input_paths = {data + "h200_all.json"};
  rep.html_path = (dir / "report.html").string();
  EXPECT_EQ(run_after_signal(rep, SIGINT),
            std::make_pair(130, std::string("gpu-basics: interrupted (SIGINT)\n")));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(Cli, TheSecondSignalTakesTheDefaultAction) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    install_interrupt_handlers();
    std::raise(SIGINT);  // recorded
    if (interrupt_signal() != SIGINT) ::_exit(10);
    std::raise(SIGINT);  // the default action: the process ends here
    ::_exit(11);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(Cli, FitTakesSizesAsPeopleWriteThem) {
  const auto r = parse({"advise", "s.pickle", "--fit", "8.8GiB", "--fit", "8.6GiB", "--fit",
                        "9.5GB", "--fit", "9000MiB", "--fit", "9448928051"});
  ASSERT_TRUE(r.opts);
  EXPECT_EQ(r.opts->fit_sizes,
            (std::vector<std::string>{"8.8GiB", "8.6GiB", "9.5GB", "9000MiB", "9448928051"}));
  for (const char* bad : {"1.5", "-1GiB", "1e3GiB", "99999999999TiB", "0", "0.0000001KiB"}) {
    std::string err;
    EXPECT_EQ(parse({"advise", "s.pickle", "--fit", bad}, nullptr, &err).exit_code, cli::exit_usage)
        << bad;
    EXPECT_NE(err.find("expected a size such as 24GiB"), std::string::npos) << err;
  }
}

// What a run writes besides its tables, as a captured log reads it (Slurm, CI, `> log 2>&1`):
// log lines never inside table rows, one line for the CSV files, progress lines at a readable
// rate. Host-only: the capture is a child process writing into a file, the clock a fake one.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include <spdlog/spdlog.h>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/logging.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "logs.hpp"
#include "run.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace std::chrono_literals;

namespace {

using gpu_basics::testing::kData;

using gpu_basics::testing::slurp;

/// Without colour codes (a logger made while stderr was a terminal keeps them).
std::string without_ansi(const std::string& s) {
  static const std::regex ansi("\x1b\\[[0-9;]*[A-Za-z]");
  return std::regex_replace(s, ansi, "");
}

/// The first line where `got` and `want` differ, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want) {
  std::istringstream g(got), w(want);
  std::string a, b;
  for (int line = 1;; ++line) {
    const bool more_g = static_cast<bool>(std::getline(g, a));
    const bool more_w = static_cast<bool>(std::getline(w, b));
    if (!more_g && !more_w) return "no difference";
    if (a != b || more_g != more_w)
      return "line " + std::to_string(line) + ": got \"" + a + "\", want \"" + b + "\"";
  }
}

/// Runs `body` in a child process whose stdout and stderr both go to `path`, stdout
/// block-buffered in 64 bytes (as a pipe or file would be, but flushed mid-row far more often).
/// Returns the child's exit status.
template <class Body>
int capture_both(const std::string& path, Body&& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(60);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(20);
    ::close(fd);
    static char buffer[64];
    if (std::setvbuf(stdout, buffer, _IOFBF, sizeof buffer) != 0) ::_exit(21);
    body();
    std::cout.flush();
    std::fflush(stdout);
    ::_exit(0);
  }
  int status = 0;
  if (child < 0 || ::waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST(Logs, ALogLineNeverLandsInsideATableWhenStdoutAndStderrShareAFile) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "logs_interleave";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const lessons::run_record rec = lessons::load_record(kData + "h200_all.json");
  const auto reports = lessons::render(rec);
  ASSERT_GE(reports.size(), 3u);
  cli::options o;
  o.command = "show";
  o.csv_path = (dir / "csv" / "all.csv").string();
  std::filesystem::create_directories(dir / "csv");
  // The real writers, in the order of a live `all` run: each lesson's tables on stdout, then a
  // log line and a progress line on stderr; at the end the outputs' one line.
  const auto run_like_all = [&] {
    setup_logging(log_level::info);
    for (const auto& rep : reports) {
      cli::print(rec, {rep}, std::cout);
      spdlog::info("{} printed", rep.lesson);
      cli::write_stderr_line("[progress] 1 s: after " + rep.lesson);
    }
    cli::write_outputs(o, rec, reports, std::cout);
  };
  const std::string log = (dir / "captured.log").string();
  ASSERT_EQ(capture_both(log, run_like_all), 0);

  std::string want;
  for (const auto& rep : reports) {
    std::ostringstream tables;
    cli::print(rec, {rep}, tables);
    want += tables.str() + "[info] " + rep.lesson + " printed\n[progress] 1 s: after " +
            rep.lesson + "\n";
  }
  std::size_t tables = 0;
  for (const auto& rep : reports) tables += rep.tables.size();
  want += "[info] wrote " + std::to_string(tables) + " CSV files: all.*.csv in " +
          (dir / "csv").string() + "\n";
  const std::string got = without_ansi(slurp(log));
  EXPECT_TRUE(got == want) << first_difference(got, want);
}

TEST(Logs, TheCsvFilesOfARunAreOneLine) {
  EXPECT_EQ(cli::csv_written_line({"out/all.info.gpu0.csv", "out/all.memory.caching.csv",
                                   "out/all.profile.nvml.csv"}),
            "wrote 3 CSV files: all.*.csv in out");
  EXPECT_EQ(cli::csv_written_line({"m.memory.peak.csv", "m.memory.caching.csv"}),
            "wrote 2 CSV files: m.memory.*.csv in .");
  EXPECT_EQ(cli::csv_written_line({"/tmp/r/x.a.tsv", "/tmp/r/x.b.tsv"}),
            "wrote 2 CSV files: x.*.tsv in /tmp/r");
  EXPECT_EQ(cli::csv_written_line({"results/one.csv"}), "wrote results/one.csv");

  // Through `show`: one file per table of h200_all.json (more than one), one line logged.
  const auto dir = std::filesystem::path(::testing::TempDir()) / "logs_csv";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  cli::options o;
  o.command = "show";
  o.input_path = kData + "h200_all.json";
  o.csv_path = (dir / "all.csv").string();
  const std::string log = (dir / "show.log").string();
  ASSERT_EQ(capture_both(log,
                         [&] {
                           std::ostringstream out, err;  // the tables are not this test's
                           if (cli::run(o, out, err) != cli::exit_ok) ::_exit(30);
                         }),
            0);
  std::size_t csv_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    csv_files += e.path().extension() == ".csv" ? 1 : 0;
  EXPECT_GT(csv_files, 1u);
  EXPECT_EQ(without_ansi(slurp(log)),
            fmt::format("[info] wrote {} CSV files: all.*.csv in {}\n", csv_files, dir.string()));
}

TEST(Logs, ProgressLinesForACapturedStderrComeAtMostOnceASecond) {
  cli::progress_lines::clock::time_point t{};
  std::vector<std::string> lines;
  std::vector<cli::progress_lines::clock::time_point> at;
  const auto record = [&](const std::string& l) {
    lines.push_back(l);
    at.push_back(t);
  };
  cli::progress_lines p(record, [&] { return t; });
  p.lesson("memory", 2, 5);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "[progress] 0 s: lesson 2 of 5, memory");

  // Twenty steps 200 ms apart: one line a second, the step that starts then.
  for (int i = 0; i < 20; ++i) {
    t += 200ms;
    p.step("size " + std::to_string(i), i, 20);
  }
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[1], "[progress] 1 s: memory 4/20, size 4");
  EXPECT_EQ(lines[4], "[progress] 4 s: memory 19/20, size 19");
  for (std::size_t i = 1; i < at.size(); ++i) EXPECT_GE(at[i] - at[i - 1], 1s) << lines[i];

  // The lesson's end says nothing (its tables follow); the next lesson's start is always a line.
  t += 100ms;
  p.step("memory", 20, 20);
  p.lesson("transfer", 3, 5);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[5], "[progress] 4 s: lesson 3 of 5, transfer");

  // Slow steps: every one is a line.
  for (int i = 0; i < 3; ++i) {
    t += 90s;
    p.step("sweep", i, 3);
  }
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[8], "[progress] 274 s: transfer 2/3, sweep");

  // One lesson alone is named without a count.
  cli::progress_lines single([&](const std::string& l) { lines.push_back(l); }, [&] { return t; });
  single.lesson("check", 1, 1);
  EXPECT_EQ(lines.back(), "[progress] 0 s: check");
}

TEST(CliLogs, RunTimeLinesCountEachLessonsSampledFigures) {
  const auto sampled = [](int n, const char* why) {
    return nlohmann::json{{"samples", n}, {"noise", 0.004}, {"stopped", why}, {"elapsed_s", 0.1}};
  };
  const nlohmann::json transfer = {{"shapes",
                                    {{{"copies",
                                       {{{"seconds", {1, 2}}, {"sampling", sampled(10, "precise")}},
                                        {{"sampling", sampled(20, "max_samples")}}}}}}},
                                   {"sync_async", {{{"sampling", sampled(13, "timeout")}}}},
                                   {"d2d", {{{"sampling", sampled(10, "precise")}}}}};
  const nlohmann::json memory = {{"caching", {{"seconds", {1.0, 2.0}}}}};
  std::vector<cli::lesson_time> times{cli::time_of("memory", 12.06, memory),
                                      cli::time_of("transfer", 20.31, transfer)};
  times[1].host_cpu = host_cpu_load{16, 0.0215, 0.4, 0.3, 0.1, 2.0};
  EXPECT_EQ(times[1].figures, 4u);
  EXPECT_EQ(times[1].samples, 53u);
  const auto lines = cli::run_time_lines(times, 33.0);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "took 33.0 s: 2 lessons");
  EXPECT_EQ(lines[1], "memory: 12.1 s");
  EXPECT_EQ(lines[2],
            "transfer: 20.3 s; 4 sampled figures, 53 samples: 2 precise, 1 at "
            "benchmark.iterations, 1 at benchmark.timeout_s; host CPUs: 2.1% stolen, 10.0% "
            "other processes (of 16)");
}

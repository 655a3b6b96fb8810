// The CLI's commands as one table: each with its help line, its own options, the check of what
// CLI11 cannot check, and what runs it. Parsing (cli.cpp) and running (run.cpp) both read it;
// nothing dispatches on a command's name.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace CLI {
class App;
}

namespace gpu_basics::cli {

/// Option values as typed, before they are checked and stored in `options`.
struct raw_options {
  std::string level, json, csv, trace, html;
  std::string html_flag = "--html";  // how the command names its HTML output in messages
};

struct command {
  std::string name;
  std::string description;
  /// The lesson it measures (lesson commands), else nullptr.
  const lessons::lesson* lesson = nullptr;
  /// Adds the command's own options to its subcommand.
  void (*add_options)(CLI::App& sub, options& o, raw_options& raw, const command& self) = nullptr;
  /// What CLI11 cannot check, after parsing: one line to `err` and false when it is bad. May be
  /// null.
  bool (*validate)(const options& o, std::ostream& err) = nullptr;
  /// Runs the command and returns its exit code; an exception is classified by run().
  int (*run)(const options& o, std::ostream& out, std::ostream& err) = nullptr;
  /// The lessons it runs write files of their own under output.directory.
  bool writes_files = false;
};

/// Every command: the lessons (registry order), all, show, report, compare, replay, advise.
[[nodiscard]] const std::vector<command>& command_table();

/// The command called `name`, or nullptr.
[[nodiscard]] const command* find_command(std::string_view name);

// What the table's entries run (run.cpp, verdicts.cpp, replay.cpp, measure_run.cpp).

/// A lesson or `all`: the configuration, outputs checked, then measure (or check --from).
int run_lessons(const options& o, std::ostream& out, std::ostream& err);
/// `show`: a saved run rendered again; no GPU, no configuration.
int run_show(const options& o, std::ostream& out, std::ostream& err);
/// `report`: saved runs drawn as one HTML file.
int run_report(const options& o, std::ostream& out, std::ostream& err);

}  // namespace gpu_basics::cli

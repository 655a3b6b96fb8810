#include "cli.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/output_path.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/profiler/trace_writer.hpp"
#include "replay.hpp"
#include "verdicts.hpp"

namespace gpu_basics::cli {

const std::vector<std::string>& commands() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> v;
    for (const auto& cmd : command_table()) v.push_back(cmd.name);
    return v;
  }();
  return c;
}

namespace {
/// Expands the placeholders ({host}, {task}, {job}) of every output path, in place, so that each
/// task of a fleet job writes its own file. Writes one line naming the option to `err` and
/// returns false on the first path that cannot be expanded.
bool expand_output_paths(options& o, raw_options& raw, std::ostream& err) {
  std::optional<std::vector<path_placeholder>> values;  // read once, and only when needed
  const auto expand = [&](std::string& path, std::string_view flag) {
    if (path.find_first_of("{%") == std::string::npos) return true;
    if (!values) values = current_path_placeholders();
    try {
      path = expand_output_path(path, *values);
      return true;
    } catch (const format_error& e) {
      err << "gpu-basics: " << flag << " " << quote_for_message(path, 200) << ": " << e.what()
          << "\n";
      return false;
    }
  };
  std::string snapshot = o.snapshot_path.value_or("");
  const bool ok = expand(raw.json, "--json") && expand(raw.csv, "--csv") &&
                  expand(raw.trace, "--trace") && expand(raw.html, raw.html_flag) &&
                  expand(snapshot, "--snapshot");
  if (ok && o.snapshot_path) o.snapshot_path = snapshot;
  return ok;
}

/// Checks the values CLI11 cannot (log level, output paths) and moves them into `o`. Writes one
/// line to `err` and returns false on the first bad one.
bool finish_options(options& o, const raw_options& raw, std::ostream& err) {
  const auto& [level, json, csv, trace, html, html_flag] = raw;
  if (!level.empty()) {
    if (!parse_log_level(level)) {
      err << "gpu-basics: --log-level: expected one of trace, debug, info, warn, error, got "
          << quote_for_message(level) << "\n";
      return false;
    }
    o.log_level = level;
  }
  if (!json.empty()) o.json_path = json;
  if (!csv.empty()) o.csv_path = csv;
  if (o.json_path && o.csv_path && *o.json_path == "-" && *o.csv_path == "-") {
    err << "gpu-basics: --json - and --csv - cannot both write to stdout\n";
    return false;
  }
  if (!trace.empty()) {
    const bool gz = trace.size() > 3 && trace.compare(trace.size() - 3, 3, ".gz") == 0;
    if (trace == "-") {
      err << "gpu-basics: --trace needs a file path\n";
      return false;
    }
    if (std::filesystem::path(trace).filename() == ".gz") {
      err << "gpu-basics: --trace " << quote_for_message(trace)
          << ": '.gz' alone is not a file name; give one, e.g. trace.json.gz\n";
      return false;
    }
    if (gz && !trace_writer::gzip_supported()) {
      err << "gpu-basics: --trace " << quote_for_message(trace)
          << ": this build has no zlib, so it cannot write .gz; drop the .gz\n";
      return false;
    }
    o.trace_path = trace;
  }
  if (o.csv_path && *o.csv_path == "-") {
    err << "gpu-basics: --csv needs a file path (tables go to stdout already)\n";
    return false;
  }
  if (!html.empty()) {
    if (html == "-") {
      err << "gpu-basics: " << html_flag << " needs a file path (the report is one HTML file)\n";
      return false;
    }
    o.html_path = html;
  }
  return true;
}
/// Note [help for people]: every option names its value in words (PATH, SIZE, FRACTION, ...)
/// with type_name(), and no validator has a description: CLI11 would append it to that name
/// ("FLOAT:FLOAT in [0 - 0.99]", "TEXT:SIZE"). What a validator accepts is said in the option's
/// text and in its error message. tests/unit/test_cli.cpp reads every command's help for these.

/// A relative threshold: a finite number from 0 to 0.99 (nan passes every comparison, so it is
/// refused by name).
const CLI::Validator& fraction() {
  static const CLI::Validator v(
      [](const std::string& value) {
        double d = 0;
        if (!CLI::detail::lexical_cast(value, d) || !std::isfinite(d))
          return "expected a number, got " + quote_for_message(value);
        if (d < 0 || d > 0.99)
          return "expected a fraction from 0 to 0.99, got " + quote_for_message(value);
        return std::string();
      },
      "");
  return v;
}

/// The options of a lesson that judges (check): --strict, --baseline, --from, --force,
/// --threshold.
void add_check_options(CLI::App* sub, options& o) {
  sub->add_flag("--strict", o.strict, "Exit non-zero on WARN too, not only on FAIL");
  sub->add_option("--baseline", o.baseline_path,
                  "A check result (--json) to compare this one with; its verdicts join the check")
      ->type_name("FILE");
  sub->add_option("--from", o.from_path,
                  "Judge a saved run (a check or an 'all' run) instead of measuring; no GPU needed")
      ->type_name("FILE");
  sub->add_flag("--force", o.force, "With --baseline: compare across GPU models or drivers");
  sub->add_option("--threshold", o.threshold,
                  "With --baseline: relative change below which a figure is the same, from 0 "
                  "to 0.99 (default 0.02)")
      ->type_name("FRACTION")
      ->check(fraction());
}

void add_compare_options(CLI::App* sub, options& o) {
  sub->add_option("results", o.input_paths,
                  "BASELINE.json NEW.json, or with --fleet one results file per node")
      ->type_name("FILE")
      ->required();
  sub->add_flag("--fleet", o.fleet, "One result per node: a node x figure table with outliers");
  sub->add_flag("--force", o.force, "Compare across GPU models or driver major versions");
  sub->add_option("--threshold", o.threshold,
                  "Loss a gate must exceed, clearly in both runs' samples, to be worse (copies "
                  "through pageable memory: at least 0.20); from 0 to 0.99 (default 0.02)")
      ->type_name("FRACTION")
      ->check(fraction());
}

/// The commands as a list for messages: "info, memory, ..., show".
std::string command_list() {
  std::string list;
  for (const auto& c : commands()) list += (list.empty() ? "" : ", ") + c;
  return list;
}

/// Checks the word before CLI11 sees it, so a missing or unknown command is named (CLI11 only
/// says that a subcommand is required). Writes one line to `err` and returns false if it is bad.
bool check_command_word(const std::vector<std::string>& args, std::ostream& err) {
  if (args.size() < 2) {
    err << "gpu-basics: a command is required: one of " << command_list()
        << " (see 'gpu-basics --help')\n";
    return false;
  }
  const std::string& word = args[1];
  if (word == "-h" || word == "--help" || word == "--version") return true;
  const auto& known = commands();
  if (std::find(known.begin(), known.end(), word) != known.end()) return true;
  if (!word.empty() && word[0] == '-') {
    err << "gpu-basics: " << quote_for_message(word)
        << ": options come after the command: gpu-basics <command> [options] (commands: "
        << command_list() << ")\n";
    return false;
  }
  err << "gpu-basics: unknown command " << quote_for_message(word);
  if (const auto near = nearest_word(word, known))
    err << "; did you mean '" << *near << "'?";
  else
    err << "; expected one of " << command_list();
  err << "\n";
  return false;
}

/// CLI11's message for `e`, except for arguments left over: those are listed in the order they
/// were given (CLI11 reverses them), each quoted.
std::string usage_message(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    std::string m = e.what();  // "--config: 1 required TEXT missing": the option has no value
    if (const auto p = m.find(": 1 required"); p != std::string::npos)
      return printable(m.substr(0, p)) + ": needs a value";
  }
  // A validator quoted the value already: the line is escaped without escaping quotes again.
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return message_line(e.what());
  std::vector<std::string> extras = app.remaining();
  for (const auto* sub : app.get_subcommands())
    for (const auto& a : sub->remaining()) extras.push_back(a);
  std::string list;
  for (const auto& a : extras) list += " " + quote_for_message(a);
  return (extras.size() == 1 ? "unexpected argument:" : "unexpected arguments:") + list;
}

/// Rejects an empty option value ("--config ''") instead of dropping it.
const CLI::Validator& non_empty() {
  static const CLI::Validator v(
      [](const std::string& value) {
        return value.empty() ? std::string("needs a value, got an empty one") : std::string();
      },
      "");
  return v;
}
}  // namespace

namespace {

void add_output_options(CLI::App* sub, raw_options& raw) {
  sub->add_option("--json", raw.json,
                  "Write results as JSON to PATH ('-' for stdout); {host}, {task} and {job} in "
                  "an output path are expanded, e.g. results/{host}.json")
      ->type_name("PATH")
      ->check(non_empty());
  sub->add_option("--csv", raw.csv,
                  "Write tables as CSV to PATH (several tables: <stem>.<table>.csv beside it)")
      ->type_name("PATH")
      ->check(non_empty());
}

/// The options of a command that measures: a lesson or `all`.
void add_run_options(CLI::App* sub, options& o, raw_options& raw, bool traces) {
  sub->add_option("-c,--config", o.config_path,
                  "YAML configuration file (default: the built-in configs/gpu_basics.yaml)")
      ->type_name("FILE")
      ->check(non_empty());
  sub->add_option("-s,--set", o.overrides,
                  "Override one configuration key, e.g. --set transfer.num_streams=8 "
                  "(repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->check(non_empty());
  sub->add_option("--log-level", raw.level,
                  "trace, debug, info, warn or error (overrides logging.level)")
      ->type_name("LEVEL")
      ->check(non_empty());
  add_output_options(sub, raw);
  sub->add_option("--html", raw.html,
                  "Write a one-file HTML report with charts of this run to PATH (opens offline)")
      ->type_name("PATH")
      ->check(non_empty());
  if (traces)
    sub->add_option(
           "--trace", raw.trace,
           "Write a Chrome/Perfetto trace of the lesson's workload (CUPTI kernels, copies, API "
           "calls, ranges, counters) to PATH; PATH.gz is gzip-compressed")
        ->type_name("PATH")
        ->check(non_empty());
}

/// A lesson's options: the run options, --trace, --snapshot and check's own, as the lesson says.
void add_lesson_options(CLI::App& sub, options& o, raw_options& raw, const command& self) {
  const lessons::lesson& l = *self.lesson;
  add_run_options(&sub, o, raw, l.traces);
  if (l.judges) add_check_options(&sub, o);
  if (l.snapshots)
    sub.add_option("--snapshot", o.snapshot_path,
                   "Write a PyTorch memory snapshot (pickle) of the allocator in the peak pass "
                   "to PATH; open it in https://pytorch.org/memory_viz")
        ->type_name("PATH")
        ->check(non_empty());
}

void add_all_options(CLI::App& sub, options& o, raw_options& raw, const command&) {
  add_run_options(&sub, o, raw, false);
}

void add_show_options(CLI::App& show, options& o, raw_options& raw, const command&) {
  show.add_option("results", o.input_path,
                  "A results file written by --json, or an advice or replay file")
      ->type_name("FILE")
      ->required()
      ->check(non_empty());
  add_output_options(&show, raw);
}

void add_report_options(CLI::App& rep, options& o, raw_options& raw, const command&) {
  rep.add_option("results", o.input_paths, "Results files written by --json (one or more)")
      ->type_name("FILE")
      ->required()
      ->check(non_empty());
  rep.add_option("-o,--output", raw.html, "The HTML file to write")
      ->type_name("PATH")
      ->required()
      ->check(non_empty());
}

void add_compare_command_options(CLI::App& cmp, options& o, raw_options& raw, const command&) {
  add_compare_options(&cmp, o);
  cmp.add_option("-c,--config", o.config_path,
                 "YAML configuration whose check.* thresholds judge the fleet's nodes")
      ->type_name("FILE");
  cmp.add_option("-s,--set", o.overrides, "Override one configuration key (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  add_output_options(&cmp, raw);
}

bool validate_compare(const options& o, std::ostream& err) {
  if (o.fleet || o.input_paths.size() == 2) return true;
  err << "gpu-basics: compare needs BASELINE.json NEW.json (or --fleet FILES...), got "
      << o.input_paths.size() << " file(s)\n";
  return false;
}

/// Accepts a byte size parse_byte_size reads ("24GiB", "40 GB", "1073741824"), above 0.
const CLI::Validator& byte_size() {
  static const CLI::Validator v(
      [](const std::string& value) {
        const auto b = parse_byte_size(value);
        return b && *b > 0 ? std::string()
                           : "expected a size such as 24GiB, 40GB or 1073741824, got " +
                                 quote_for_message(value);
      },
      "");
  return v;
}

/// --device-memory SIZE / --device RESULT.json: the device a fraction is of. The help says that
/// they exclude each other; option_text() keeps CLI11's "Excludes: ..." out of the option column.
void add_device_memory_options(CLI::App& app, options& o) {
  auto* size = app.add_option("--device-memory", o.device_memory,
                              "The GPU's total memory, e.g. 80GiB: a limit becomes "
                              "per_process_memory_fraction of it (not with --device)")
                   ->option_text("SIZE")
                   ->check(byte_size());
  app.add_option("--device", o.device_result,
                 "A saved `gpu-basics info` (or `all`) result: its GPU's total memory, as "
                 "--device-memory (not with --device-memory)")
      ->option_text("FILE")
      ->check(non_empty())
      ->excludes(size);
}

/// --json PATH|- of a command on snapshots: its `what` as JSON.
void add_json_option(CLI::App& app, raw_options& raw, const std::string& what) {
  app.add_option("--json", raw.json, "Write the " + what + " as JSON to PATH ('-' for stdout)")
      ->type_name("PATH")
      ->check(non_empty());
}

void add_replay_options(CLI::App& rpl, options& o, raw_options& raw, const command&) {
  rpl.add_option("snapshot", o.input_path, "A snapshot pickle recorded with history")
      ->type_name("FILE")
      ->required()
      ->check(non_empty());
  rpl.add_option("--policy", o.policies,
                 "Also replay this PYTORCH_CUDA_ALLOC_CONF string, e.g. "
                 "\"expandable_segments:True,max_split_size_mb:256\" (repeatable)")
      ->type_name("CONF")
      ->allow_extra_args(false)
      ->check(non_empty());
  add_json_option(rpl, raw, "replay");
  add_device_memory_options(rpl, o);
}

void add_advise_options(CLI::App& adv, options& o, raw_options& raw, const command&) {
  adv.add_option("snapshot", o.input_path, "A snapshot pickle recorded with history")
      ->type_name("FILE")
      ->required()
      ->check(non_empty());
  adv.add_option("--fit", o.fit_sizes,
                 "Will it fit under this reserved limit (torch.cuda.set_per_process_memory_"
                 "fraction times the device's memory), e.g. 24GiB (repeatable)")
      ->type_name("SIZE")
      ->allow_extra_args(false)
      ->check(byte_size());
  adv.add_option("--policy", o.policies,
                 "Also search this PYTORCH_CUDA_ALLOC_CONF string (repeatable)")
      ->type_name("CONF")
      ->allow_extra_args(false)
      ->check(non_empty());
  add_json_option(adv, raw, "advice");
  adv.add_option("--html", raw.html, "Draw the advice as one HTML file at PATH")
      ->type_name("PATH")
      ->check(non_empty());
  add_device_memory_options(adv, o);
  adv.add_option("--torch-python", o.torch_python,
                 "A Python with PyTorch: its parser reads the printed conf first, so a key it "
                 "does not know is never printed")
      ->type_name("PYTHON")
      ->check(non_empty());
}

void add_preflight_options(CLI::App& pre, options& o, raw_options& raw, const command&) {
  pre.add_option("recordings", o.input_paths,
                 "Two or three snapshot pickles of the same job, recorded with history at the "
                 "batches of --batches, in that order")
      ->type_name("FILE")
      ->required()
      ->check(non_empty());
  pre.add_option("--batches", o.batches, "The batch size of each recording, increasing, e.g. 2,4,8")
      ->type_name("B,B[,B]")
      ->required();
  pre.add_option("--at", o.at_batches,
                 "Predict the peaks at this batch size (repeatable; default: the recorded ones)")
      ->type_name("B")
      ->allow_extra_args(false);
  pre.add_option("--fit", o.fit_sizes,
                 "The largest batch whose replay fits this reserved limit, e.g. 80GiB")
      ->type_name("SIZE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw)
      ->check(byte_size());
  add_json_option(pre, raw, "prediction");
  pre.add_option("--html", raw.html,
                 "Draw the predicted peak reserved against the batch as one HTML file at PATH")
      ->type_name("PATH")
      ->check(non_empty());
}

/// What CLI11 cannot check of preflight: the recordings' count, the batches (one per recording,
/// increasing) and --at.
bool validate_preflight(const options& o, std::ostream& err) {
  const auto fail = [&](const std::string& m) {
    err << "gpu-basics: " << message_line(m) << "\n";
    return false;
  };
  if (o.input_paths.size() < 2 || o.input_paths.size() > 3)
    return fail("preflight needs 2 or 3 recordings, got " + std::to_string(o.input_paths.size()));
  try {
    const auto batches = parse_batches(o.batches);
    if (batches.size() != o.input_paths.size())
      return fail("--batches " + quote_for_message(o.batches) + ": " +
                  std::to_string(batches.size()) + " batches for " +
                  std::to_string(o.input_paths.size()) + " recordings; give one per recording");
    for (const auto& a : o.at_batches) (void)parse_batch(a, "--at");
  } catch (const format_error& e) {
    return fail(e.what());
  }
  return true;
}

std::vector<command> make_table() {
  std::vector<command> t;
  bool all_writes_files = false;
  for (const auto& l : lessons::registry()) {
    command c;
    c.name = std::string(l.name);
    c.description = std::string(l.description);
    c.lesson = &l;
    c.add_options = add_lesson_options;
    c.run = run_lessons;
    c.writes_files = l.writes_files;
    if (l.in_all) all_writes_files = all_writes_files || l.writes_files;
    t.push_back(std::move(c));
  }
  t.push_back({"all", "info, then every lesson, on one configuration", nullptr, add_all_options,
               nullptr, run_lessons, all_writes_files});
  t.push_back({"show",
               "Render a saved run (--json output, any schema version) again, without a GPU",
               nullptr, add_show_options, nullptr, run_show});
  t.push_back({"report",
               "Draw saved runs (--json output) as one self-contained HTML file with charts; "
               "several runs overlay in the same charts. No GPU needed",
               nullptr, add_report_options, nullptr, run_report});
  t.push_back({"compare",
               "Compare NEW.json with BASELINE.json figure by figure (same, better, worse), or, "
               "with --fleet, one result per node with outliers marked. No GPU needed",
               nullptr, add_compare_command_options, validate_compare, run_compare});
  t.push_back({"replay",
               "Replay a PyTorch memory snapshot's allocations (torch.cuda.memory._dump_snapshot) "
               "under several allocator policies and compare their peak reserved memory. No GPU "
               "needed",
               nullptr, add_replay_options, nullptr, run_replay});
  t.push_back({"advise",
               "From a PyTorch memory snapshot to decisions: will it fit under a limit (--fit), "
               "which PYTORCH_CUDA_ALLOC_CONF to use (a search over the policy space), and why "
               "reserved memory is free but unused at peak. No GPU needed",
               nullptr, add_advise_options, nullptr, run_advise});
  t.push_back({"preflight",
               "Before launch: PyTorch's peak memory at a batch size nobody has run (--at), and "
               "the largest batch that fits a limit (--fit), from snapshots recorded at two or "
               "three small batches. No GPU needed",
               nullptr, add_preflight_options, validate_preflight, run_preflight_command});
  return t;
}

}  // namespace

parse_result parse(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  register_allocator_keys();  // before any conf string is checked (--set, the YAML, --policy)
  CLI::App app{"gpu-basics: measure and explain GPU memory management and CPU<->GPU data movement",
               "gpu-basics"};
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "gpu-basics " + std::string(gpu_basics_version()) + " (" +
                                        std::string(gpu_basics_git_revision()) + ")");
  options o;
  raw_options raw;
  for (const auto& c : command_table())
    c.add_options(*app.add_subcommand(c.name, c.description), o, raw, c);
  if (!check_command_word(args, err)) return {std::nullopt, exit_usage};
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  if (!reversed.empty()) reversed.pop_back();  // argv[0]
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e, out, err);
      return {std::nullopt, exit_ok};
    }
    err << "gpu-basics: " << usage_message(app, e) << " (see 'gpu-basics --help')\n";
    return {std::nullopt, exit_usage};
  }
  for (const auto* sub : app.get_subcommands()) o.command = sub->get_name();
  // Every command's options share `raw`: the flag is the command's, once it is known.
  raw.html_flag = o.command == "report" ? "-o" : "--html";
  const command* cmd = find_command(o.command);
  if (!expand_output_paths(o, raw, err) || !finish_options(o, raw, err) ||
      (cmd->validate && !cmd->validate(o, err)))
    return {std::nullopt, exit_usage};
  return {o, exit_ok};
}

const std::vector<command>& command_table() {
  static const std::vector<command> t = make_table();
  return t;
}

const command* find_command(std::string_view name) {
  for (const auto& c : command_table())
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace gpu_basics::cli

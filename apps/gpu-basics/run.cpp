#include "run.hpp"

#include <csignal>
#include <ostream>

#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "logs.hpp"
#include "replay.hpp"
#include "saved.hpp"

#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/logging.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "gpu_basics/report/report.hpp"
#include "verdicts.hpp"

namespace gpu_basics::cli {

void say(std::ostream& err, const std::string& message) {
  err << "gpu-basics: " << message_line(message) << "\n";
}

/// The tables of each lesson, as the live run and `show` print them; a saved run's strings may
/// hold control characters, so the text is escaped for the terminal.
void print(const lessons::run_record& rec, const std::vector<presentation::report>& reports,
           std::ostream& out) {
  for (const auto& rep : reports) {
    if (rec.command == "all") out << "==== gpu-basics " << rep.lesson << " ====\n\n";
    for (const auto& t : rep.tables) out << terminal_text(presentation::render_text(t)) << "\n";
  }
}

void write_outputs(const options& o, const lessons::run_record& rec,
                   const std::vector<presentation::report>& reports, std::ostream& out) {
  throw_if_interrupted();  // an interrupted run writes nothing
  if (o.json_path && *o.json_path == "-") {
    out << lessons::to_json(rec, reports).dump(2) << "\n";
  } else if (o.json_path) {
    write_file_atomically(*o.json_path, lessons::to_json(rec, reports).dump(2) + "\n");
    spdlog::info("wrote {}", *o.json_path);
  }
  if (o.csv_path) {
    std::vector<presentation::table> tables;
    for (const auto& rep : reports)
      for (auto t : rep.tables) {
        if (rec.command == "all") t.id = rep.lesson + "." + t.id;
        tables.push_back(std::move(t));
      }
    // One line for them all: an `all` run writes dozens.
    spdlog::info("{}", csv_written_line(presentation::write_csv(tables, *o.csv_path)));
  }
  if (o.html_path) {
    write_file_atomically(*o.html_path, report::render_html({{report::live_label(rec), rec}}));
    spdlog::info("wrote {}", *o.html_path);
  }
}

std::pair<int, std::string> classify(const std::exception& e) {
  if (const auto* i = dynamic_cast<const interrupted*>(&e))
    return {i->signal_number() == SIGTERM ? exit_terminated : exit_interrupted, e.what()};
  if (dynamic_cast<const no_device_error*>(&e)) return {exit_no_gpu, e.what()};
  if (dynamic_cast<const out_of_memory*>(&e)) return {exit_out_of_memory, e.what()};
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return {exit_out_of_memory, std::string("out of host memory (") + e.what() + ")"};
  if (dynamic_cast<const verification_error*>(&e))
    return {exit_verification, std::string("verification failed: ") + e.what()};
  if (dynamic_cast<const nccl_error*>(&e)) return {exit_nccl, e.what()};
  if (dynamic_cast<const cuda_error*>(&e)) return {exit_cuda, e.what()};
  if (dynamic_cast<const io_error*>(&e)) return {exit_io, e.what()};
  if (dynamic_cast<const config_error*>(&e)) return {exit_usage, e.what()};
  if (dynamic_cast<const format_error*>(&e)) return {exit_usage, e.what()};
  return {exit_internal, std::string("internal error: ") + e.what()};
}

void check_written(std::ostream& out) {
  if (out.good()) out.flush();
  if (!out.good())
    throw io_error("cannot write to the standard output (a full disk, or a closed pipe?)");
}

namespace {
/// Fails before any measuring when an output cannot be written (exit 7 then, not after minutes).
void check_outputs(const options& o, const config* cfg, bool writes_files) {
  if (o.json_path && *o.json_path != "-") check_writable(*o.json_path);
  if (o.csv_path) check_writable(*o.csv_path);
  if (o.trace_path) check_writable(*o.trace_path);
  if (o.snapshot_path) check_writable(*o.snapshot_path);
  if (o.html_path) check_writable(*o.html_path);
  // The lessons that write files of their own write them under output.directory.
  if (cfg && writes_files) check_writable_directory(cfg->output.directory);
}

/// Refuses two outputs that are one file (the second would replace the first), and an output
/// that is an input (it would be replaced before, or while, it is read): same device and inode,
/// or for new files the same canonical directory and name. Special files (/dev/null) and stdout
/// are exempt: they are written in place.
/// @throws format_error naming both options and the file.
void check_distinct_paths(const options& o) {
  std::vector<std::pair<std::string, std::string>> outputs, inputs;  // option, path
  const auto output = [&](const char* flag, const std::optional<std::string>& p) {
    if (p && *p != "-" && !writes_in_place(*p)) outputs.emplace_back(flag, *p);
  };
  output("--json", o.json_path);
  output("--csv", o.csv_path);
  output(o.command == "report" ? "-o" : "--html", o.html_path);
  output("--trace", o.trace_path);
  output("--snapshot", o.snapshot_path);
  if (!o.input_path.empty()) inputs.emplace_back("the input", o.input_path);
  for (const auto& p : o.input_paths) inputs.emplace_back("the input", p);
  if (o.from_path) inputs.emplace_back("--from", *o.from_path);
  if (o.baseline_path) inputs.emplace_back("--baseline", *o.baseline_path);
  if (!o.config_path.empty()) inputs.emplace_back("--config", o.config_path);
  if (o.device_result) inputs.emplace_back("--device", *o.device_result);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t k = i + 1; k < outputs.size(); ++k)
      if (same_file(outputs[i].second, outputs[k].second))
        throw format_error(outputs[i].first + " and " + outputs[k].first + " name the same file, " +
                           quote_for_message(outputs[k].second, 200) + "; give each its own");
    for (const auto& [what, path] : inputs)
      if (same_file(outputs[i].second, path))
        throw format_error(outputs[i].first + " " + quote_for_message(outputs[i].second, 200) +
                           " is " + what + " (" + quote_for_message(path, 200) +
                           "); refusing to overwrite an input");
  }
}

}  // namespace

/// `report`: saved runs drawn as one HTML file, or one advice or replay file drawn as its page.
/// Every failure is the input's or the output path's, so every failure is a usage error (exit
/// 2); nothing is left half-written.
int run_report(const options& o, std::ostream& out, std::ostream& err) {
  try {
    std::vector<lessons::run_record> records;
    for (const auto& path : o.input_paths) {
      throw_if_interrupted();  // Ctrl-C between files
      saved_file f = read_saved_file(path);
      if (f.kind != saved_kind::results) {
        if (o.input_paths.size() > 1)
          throw format_error(printable(path) + " is " + describe(f.kind) +
                             "; report draws such a file alone, not with other files");
        return report_saved_snapshot_file(o, f, out);
      }
      records.push_back(lessons::parse_record(std::move(f.json), path));
      records.back().source = path;
    }
    const auto runs = report::label_runs(std::move(records));
    const std::string html = report::render_html(runs);
    throw_if_interrupted();  // an interrupted report writes nothing
    write_file_atomically(*o.html_path, html);
    out << "wrote " << message_line(*o.html_path) << " (" << (html.size() + 1023) / 1024 << " KiB, "
        << runs.size() << (runs.size() == 1 ? " run" : " runs") << ")\n";
    return exit_ok;
  } catch (const io_error& e) {
    say(err, e.what());
  } catch (const format_error& e) {
    say(err, e.what());
  }
  return exit_usage;
}

/// `show`: a saved run, advice or replay rendered again; no GPU, no configuration.
int run_show(const options& o, std::ostream& out, std::ostream& err) {
  check_outputs(o, nullptr, false);
  saved_file f;
  try {
    f = read_saved_file(o.input_path);
  } catch (const io_error& e) {  // an input that cannot be read is a usage error, not exit 7
    say(err, e.what());
    return exit_usage;
  }
  if (f.kind != saved_kind::results) return show_saved_snapshot_file(o, f, out);
  lessons::run_record rec = lessons::parse_record(std::move(f.json), o.input_path);
  rec.source = o.input_path;
  const auto reports = lessons::render(rec);
  const bool json_to_stdout = o.json_path && *o.json_path == "-";
  if (!json_to_stdout) {
    print(rec, reports, out);
    check_written(out);  // lost tables: no files written either
  }
  for (const auto& [name, why] : rec.errors) say(err, name + " failed in this run: " + why);
  write_outputs(o, rec, reports, out);
  return exit_ok;
}

int run_lessons(const options& o, std::ostream& out, std::ostream& err) {
  // The configuration and the outputs are checked before any GPU is touched.
  config cfg = load_config(o.config_path, o.overrides);
  if (o.log_level) cfg.logging.level = *parse_log_level(*o.log_level);
  const command* cmd = find_command(o.command);
  check_outputs(o, &cfg, cmd != nullptr && cmd->writes_files);
  throw_if_interrupted();
  setup_logging(cfg.logging.level);
  const auto baseline = load_baseline(o);  // bad input is exit 2 before any GPU work
  if (o.from_path) return judge_saved(o, cfg, baseline, out, err);
  return measure_lessons(o, std::move(cfg), baseline, out, err);
}

int run(const options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](int code, const std::string& message) {
    say(err, message);
    return code;
  };
  const command* cmd = find_command(o.command);
  if (cmd == nullptr) return fail(exit_usage, "unknown command " + quote_for_message(o.command));
  try {
    // Log lines go to stderr for every command (the lessons set their configured level later):
    // spdlog's own default logger writes to stdout, into the tables or `--json -`.
    setup_logging(log_level::info);
    check_distinct_paths(o);
    const int code = cmd->run(o, out, err);
    // Tables or JSON lost on a full disk are not a success (exit 7 said so already: once).
    if (code != exit_io) check_written(out);
    return code;
  } catch (const std::exception& e) {
    const auto [code, message] = classify(e);
    return fail(code, message);
  } catch (...) {  // nothing may escape the front door
    return fail(exit_internal, "internal error: an exception that is not a std::exception");
  }
}

}  // namespace gpu_basics::cli

// Measuring: the lesson commands on the GPU (not in a host-only build: host_only_run.cpp).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <vector>

#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/host_cpu.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/logging.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "logs.hpp"
#include "run.hpp"
#include "verdicts.hpp"

namespace gpu_basics::cli {

namespace {

/// A one-line progress display on stderr that rewrites itself: for a terminal. Every report is
/// also the lesson's check for Ctrl-C / SIGTERM: an `interrupted` error unwinds it from there.
lessons::progress_fn terminal_progress(const std::string& lesson) {
  return [lesson](const std::string& item, int done, int total) {
    throw_if_interrupted();
    flush_stdout();
    if (done >= total)
      std::fprintf(stderr, "\r\033[K");
    else
      std::fprintf(stderr, "\r\033[K[%s %d/%d] %s", lesson.c_str(), done, total, item.c_str());
    std::fflush(stderr);
  };
}

/// Progress for a captured stderr (Slurm, CI, a file): whole lines, at most about one a second
/// (logs.hpp); none at log level warn or error. Each report checks for Ctrl-C / SIGTERM as above.
lessons::progress_fn captured_progress(progress_lines* lines) {
  return [lines](const std::string& item, int done, int total) {
    throw_if_interrupted();
    if (lines) lines->step(item, done, total);
  };
}

/// The lessons a command measures, in order.
std::vector<const lessons::lesson*> lessons_of(const std::string& command) {
  std::vector<const lessons::lesson*> chosen;
  for (const auto& l : lessons::measuring_registry())
    if (command == "all" ? l.in_all : l.name == command) chosen.push_back(&l);
  return chosen;
}

/// This executable's path (the unified lesson runs it as a child), or nullopt.
std::optional<std::string> self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  return p.string();
}

/// Measures the lessons of the command; a lesson that fails under `all` is reported in one line
/// (and under "errors") and the others still run. Returns the first failure's exit code.
int measure(const options& o, lessons::context& ctx, lessons::run_record& rec,
            std::vector<presentation::report>& reports, std::ostream& out, std::ostream& err,
            const std::function<void(nlohmann::json&)>& amend, std::vector<lesson_time>& times) {
  const bool print_live = !(o.json_path && *o.json_path == "-");
  const lessons::device_facts facts = lessons::device_facts::of(ctx.device(), ctx.nvml_status);
  int code = exit_ok;
  const bool terminal = isatty(2) != 0;
  std::optional<progress_lines> lines;
  if (!terminal && ctx.cfg.logging.level <= log_level::info) lines.emplace(write_stderr_line);
  const auto chosen = lessons_of(o.command);
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto& l = *chosen[i];
    throw_if_interrupted();
    const std::string name(l.name);
    if (lines) lines->lesson(name, static_cast<int>(i + 1), static_cast<int>(chosen.size()));
    ctx.progress =
        terminal ? terminal_progress(name) : captured_progress(lines ? &*lines : nullptr);
    nlohmann::json result;
    const host_cpu_meter cpu;
    const double t0 = host_seconds();
    try {
      result = l.measure(ctx);
    } catch (const no_device_error&) {
      throw;  // nothing else can run either
    } catch (const interrupted&) {
      throw;  // the user asked to stop everything
    } catch (const std::exception& e) {
      if (o.command != "all") throw;
      const auto [rc, message] = classify(e);
      err << "gpu-basics: " << name << ": " << message << "\n";
      rec.errors.emplace_back(name, message);
      if (code == exit_ok) code = rc;
      lessons::clear_device_error();
      continue;
    }
    times.push_back(time_of(name, host_seconds() - t0, result));
    times.back().host_cpu = cpu.load();
    if (amend) amend(result);
    reports.push_back(l.render(result, facts));
    rec.results.emplace_back(name, std::move(result));
    if (print_live) print(rec, {reports.back()}, out);
  }
  return code;
}

}  // namespace

int measure_lessons(const options& o, config cfg,
                    const std::optional<lessons::run_record>& baseline, std::ostream& out,
                    std::ostream& err) {
  lessons::context ctx = lessons::open_context(cfg);
  ctx.trace_path = o.trace_path;
  ctx.snapshot_path = o.snapshot_path;
  ctx.charts = o.html_path.has_value();
  ctx.self_exe = self_executable();
  lessons::run_record rec;
  rec.command = o.command;
  rec.environment = environment_json(ctx.cfg, ctx.devices, ctx.nvml_status);
  std::vector<presentation::report> reports;
  std::function<void(nlohmann::json&)> amend;
  if (baseline) amend = [&](nlohmann::json& result) { add_baseline(result, rec, *baseline, o); };
  std::vector<lesson_time> times;
  const double t0 = host_seconds();
  int code = measure(o, ctx, rec, reports, out, err, amend, times);
  const double total_s = host_seconds() - t0;
  rec.environment = environment_json(ctx.cfg, ctx.devices, ctx.nvml_status);
  // How busy the host was during each lesson: compare names it beside worse host-bound gates.
  for (const auto& t : times)
    if (t.host_cpu) rec.environment["host_cpu"][t.lesson] = *t.host_cpu;
  write_outputs(o, rec, reports, out);
  flush_stdout();
  for (const auto& line : run_time_lines(times, total_s)) spdlog::info("{}", line);
  const command* cmd = find_command(o.command);
  if (cmd && cmd->lesson && cmd->lesson->judges && code == exit_ok)
    code = check_exit_code(rec, o.strict, err);
  return code;
}

int run_ledger_probe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.size() != 4) {
    err << "gpu-basics: usage: gpu-basics ledger-probe DEVICE PCI_BUS_ID\n";
    return exit_usage;
  }
  try {
    setup_logging(log_level::warn);  // to stderr: stdout carries the JSON alone
    const int device = std::stoi(args[2]);
    out << nlohmann::json(lessons::run_ledger_probe(device, args[3])).dump() << "\n";
    return exit_ok;
  } catch (const std::exception& e) {
    const auto [rc, message] = classify(e);
    say(err, message);
    return rc;
  }
}

}  // namespace gpu_basics::cli

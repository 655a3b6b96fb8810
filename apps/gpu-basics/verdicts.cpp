#include "verdicts.hpp"

#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/verdict/compare.hpp"
#include "gpu_basics/verdict/fleet.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "run.hpp"

namespace gpu_basics::cli {

namespace {

/// A results file as input: unreadable and malformed files are both bad input.
lessons::run_record load_input(const std::string& path) {
  try {
    return lessons::load_record(path);
  } catch (const io_error& e) {
    throw format_error(e.what());
  }
}

std::string stem_of(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

const nlohmann::json* check_json(const lessons::run_record& rec) {
  for (const auto& [name, j] : rec.results)
    if (name == "check") return &j;
  return nullptr;
}

void write_json(const options& o, const nlohmann::json& j, std::ostream& out) {
  if (!o.json_path) return;
  if (*o.json_path == "-")
    out << j.dump(2) << "\n";
  else
    write_file_atomically(*o.json_path, j.dump(2) + "\n");
}

int compare_two(const options& o, std::ostream& out, std::ostream& err) {
  const auto& [base_path, new_path] = std::pair{o.input_paths[0], o.input_paths[1]};
  const auto base = load_input(base_path);
  throw_if_interrupted();
  const auto next = load_input(new_path);
  verdict::ensure_comparable(base, base_path, next, new_path, o.force);
  const auto c = verdict::compare(base, next, o.threshold);
  if (c.rows.empty() && c.informational.empty())
    throw format_error(base_path + " and " + new_path + ": no figure is present in both");
  const auto gates = verdict::comparison_table(
      c, fmt::format("{} (new) against {} (baseline): gates, worst first", new_path, base_path));
  const auto info = verdict::informational_table(c);
  if (!(o.json_path && *o.json_path == "-"))
    out << terminal_text(presentation::render_text(gates)) << "\n"
        << terminal_text(presentation::render_text(info)) << "\n";
  throw_if_interrupted();  // an interrupted comparison writes nothing
  nlohmann::json j = verdict::to_json(c);
  j["baseline"] = base_path;
  j["new"] = new_path;
  write_json(o, j, out);
  if (o.csv_path) (void)presentation::write_csv({gates, info}, *o.csv_path);
  if (const auto worse = c.count(verdict::change::worse); worse > 0) {
    say(err, fmt::format("{} gate(s) worse than the baseline, first: {}", worse,
                         c.rows.front().base.name));
    return exit_worse;
  }
  return exit_ok;
}

int compare_fleet(const options& o, std::ostream& out, std::ostream& err) {
  const config cfg = load_config(o.config_path, o.overrides);
  const auto t = lessons::thresholds_of(cfg);
  std::vector<verdict::fleet_node> nodes;
  std::optional<std::string> model;
  for (const auto& path : o.input_paths) {
    throw_if_interrupted();  // Ctrl-C between nodes
    const auto rec = load_input(path);
    auto check = verdict::check_of(rec, t);
    if (!o.force && model && *model != check.gpu)
      throw format_error(
          fmt::format("refusing a fleet of different GPU models ({} and {} in {}); "
                      "--force mixes them anyway",
                      *model, check.gpu, path));
    model = check.gpu;
    nodes.push_back({stem_of(path), std::move(check)});
  }
  const auto f = verdict::analyze_fleet(nodes);
  throw_if_interrupted();  // an interrupted comparison writes nothing
  if (!(o.json_path && *o.json_path == "-"))
    out << terminal_text(presentation::render_text(verdict::fleet_table(f))) << "\n";
  write_json(o, verdict::to_json(f), out);
  if (o.csv_path) (void)presentation::write_csv({verdict::fleet_table(f)}, *o.csv_path);
  if (f.degraded() > 0) {
    say(err, fmt::format("{} of {} node(s) degraded", f.degraded(), f.rows.size()));
    return exit_worse;
  }
  return exit_ok;
}

}  // namespace

int run_compare(const options& o, std::ostream& out, std::ostream& err) {
  try {
    return o.fleet ? compare_fleet(o, out, err) : compare_two(o, out, err);
  } catch (const format_error& e) {
    say(err, e.what());
  } catch (const config_error& e) {
    say(err, e.what());
  } catch (const io_error& e) {  // an output that cannot be written
    say(err, e.what());
    return exit_io;
  } catch (const interrupted&) {
    throw;  // run() gives it its exit code
  } catch (const std::exception& e) {
    say(err, std::string("internal error: ") + e.what());
    return exit_internal;
  }
  return exit_usage;
}

std::optional<lessons::run_record> load_baseline(const options& o) {
  if (!o.baseline_path) return std::nullopt;
  auto rec = load_input(*o.baseline_path);
  if (rec.command != "check")
    throw format_error(*o.baseline_path + ": a '" + rec.command +
                       "' run is not a check baseline; save one with 'gpu-basics check --json'");
  return rec;
}

void add_baseline(nlohmann::json& check_result, const lessons::run_record& live,
                  const lessons::run_record& baseline, const options& o) {
  lessons::run_record now;
  now.command = "check";
  now.environment = live.environment;
  now.results.emplace_back("check", check_result);
  verdict::ensure_comparable(baseline, *o.baseline_path, now, "this run", o.force);
  const auto c = verdict::compare(baseline, now, o.threshold);
  auto r = lessons::result_from_json<lessons::check_result>(check_result, "check");
  const auto add = [&](const verdict::figure_verdict& row, bool gate) {
    lessons::check_item it;
    it.id = "baseline";
    it.name = "vs baseline: " + row.base.name;
    const bool worse = gate && row.j.verdict == verdict::change::worse;
    it.status = worse ? "WARN" : "PASS";
    it.value =
        fmt::format("{} ({:+.1f}%, {})", verdict::format_value(row.next.value, row.next.unit),
                    row.j.delta * 100,
                    gate ? verdict::to_string(row.j.verdict) : "informational, " + row.base.why);
    it.threshold =
        fmt::format("{} within {:.1f}%", verdict::format_value(row.base.value, row.base.unit),
                    row.j.tolerance * 100);
    if (worse)
      it.hint =
          "worse than the baseline beyond the threshold, clear in both runs' samples: compare "
          "the environments (driver, clocks, BIOS, other load)";
    it.measured = row.j.delta;
    it.limit = row.j.tolerance;
    r.items.push_back(std::move(it));
  };
  for (const auto& row : c.rows) add(row, true);
  for (const auto& row : c.informational) add(row, false);
  check_result = r;
}

int check_exit_code(const lessons::run_record& rec, bool strict, std::ostream& err) {
  const nlohmann::json* j = check_json(rec);
  if (!j) return exit_ok;
  const auto r = lessons::result_from_json<lessons::check_result>(*j, "check");
  const std::string status = lessons::overall_status(r.items);
  if (status == "PASS" || (status == "WARN" && !strict)) return exit_ok;
  for (const auto& it : r.items)
    if (it.status == "FAIL" || (strict && it.status == "WARN")) {
      say(err, fmt::format("check {}: {}: {} (threshold {}){}",
                           it.status == "FAIL" ? "failed" : "warned (--strict)", it.name, it.value,
                           it.threshold, it.hint.empty() ? "" : "; " + it.hint));
      break;
    }
  return exit_check_failed;
}

int judge_saved(const options& o, const config& cfg,
                const std::optional<lessons::run_record>& baseline, std::ostream& out,
                std::ostream& err) {
  const auto saved = load_input(*o.from_path);
  lessons::run_record rec;
  rec.command = "check";
  rec.environment = saved.environment;
  nlohmann::json result = verdict::check_of(saved, lessons::thresholds_of(cfg));
  if (baseline) add_baseline(result, rec, *baseline, o);
  rec.results.emplace_back("check", std::move(result));
  const auto reports = lessons::render(rec);
  if (!(o.json_path && *o.json_path == "-")) print(rec, reports, out);
  write_outputs(o, rec, reports, out);
  return check_exit_code(rec, o.strict, err);
}

}  // namespace gpu_basics::cli

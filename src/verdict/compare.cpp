#include "gpu_basics/verdict/compare.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics::verdict {

using nlohmann::json;

namespace {

/// Keys that hold no comparable figure: samples, timelines and their time stamps, traces,
/// NVML's utilization and power (what the GPU did, not how fast), datasheet ceilings and the
/// check's own verdicts and run time.
bool skipped(const std::string& key) {
  static const char* const kSkip[] = {"seconds",
                                      "seconds_joint",
                                      "candidate_median_s",
                                      "series",
                                      "batches",
                                      "start_s",
                                      "end_s",
                                      "trace",
                                      "nvml",
                                      "link_bytes_per_s",
                                      "hbm_bytes_per_s",
                                      "peak_flops_per_s",
                                      "bf16_peak_flops_per_s",
                                      "items",
                                      "thresholds",
                                      "elapsed_s",
                                      "sampling",
                                      "environment",
                                      "health",
                                      "gpus"};
  return std::find(std::begin(kSkip), std::end(kSkip), key) != std::end(kSkip);
}

bool is_summary(const json& j) {
  return j.is_object() && j.contains("median") && j.contains("rel_spread") &&
         j["median"].is_number() && j["rel_spread"].is_number();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The unit and direction a key's name states, or nothing.
struct kind {
  const char* unit;
  bool higher_better;
};
std::optional<kind> kind_of(const std::string& key) {
  if (ends_with(key, "bytes_per_s")) return kind{"bytes/s", true};
  if (ends_with(key, "flops_per_s")) return kind{"flop/s", true};
  if (key == "fragmentation") return kind{"fraction", false};
  if (ends_with(key, "_s")) return kind{"s", false};
  return std::nullopt;
}

/// What tells an element of a list from its siblings: its naming fields, in a fixed order.
std::string identity(const json& e, std::size_t index) {
  if (!e.is_object()) return std::to_string(index);
  static const char* const kNames[] = {"shape", "precision", "op",   "direction", "memory",
                                       "name",  "label",     "kind", "metric",    "method"};
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  for (const char* k : kNames)
    if (e.contains(k) && e[k].is_string()) add(e[k].get<std::string>());
  if (e.contains("m") && e.contains("n") && e.contains("k") && e["m"].is_number_unsigned())
    add(fmt::format("{}x{}x{}", e["m"].get<std::uint64_t>(), e["n"].get<std::uint64_t>(),
                    e["k"].get<std::uint64_t>()));
  if (e.contains("bytes") && e["bytes"].is_number_unsigned())
    add(format_bytes(e["bytes"].get<std::uint64_t>()));
  if (e.contains("streams") && e["streams"].is_number_unsigned() && e["streams"].get<int>() != 1)
    add(fmt::format("{} streams", e["streams"].get<unsigned>()));
  if (e.contains("compute_to_copy") && e["compute_to_copy"].is_number())
    add(fmt::format("compute/copy {}", e["compute_to_copy"].get<double>()));
  if (e.contains("max_split_size"))
    add(e["max_split_size"].is_null() ? "max_split unlimited"
                                      : "max_split " + e["max_split_size"].dump());
  return out.empty() ? std::to_string(index) : out;
}

/// An element as its readable name calls it: its label where it has one (a label already says
/// what its kind would), else its identity.
std::string readable_identity(const json& e, std::size_t index) {
  if (e.is_object() && e.contains("label") && e["label"].is_string())
    return e["label"].get<std::string>();
  return identity(e, index);
}

/// A key as people read it: unit suffixes dropped, underscores as spaces, a copy direction last
/// ("h2d_staged" -> "staged H2D"); empty for the headline rates ("bandwidth", "flops"), whose
/// unit says them.
std::string readable_key(std::string key) {
  for (const char* suffix : {"bytes_per_s", "flops_per_s", "_s"})
    if (ends_with(key, suffix)) {
      key.resize(key.size() - std::string_view(suffix).size());
      break;
    }
  while (!key.empty() && key.back() == '_') key.pop_back();
  std::vector<std::string> words, directions;
  for (std::size_t i = 0; i <= key.size();) {
    const std::size_t j = std::min(key.find('_', i), key.size());
    std::string w = key.substr(i, j - i);
    if (w == "h2d" || w == "d2h" || w == "d2d") {
      std::transform(w.begin(), w.end(), w.begin(),
                     [](unsigned char c) { return std::toupper(c); });
      directions.push_back(w);
    } else if (!w.empty()) {
      words.push_back(w);
    }
    i = j + 1;
  }
  words.insert(words.end(), directions.begin(), directions.end());
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out == "bandwidth" || out == "flops" ? "" : out;
}

/// Words of a name part; a number and the byte unit after it are one word ("256 MiB").
std::vector<std::string> words_of(const std::string& part) {
  std::vector<std::string> out;
  std::istringstream in(part);
  for (std::string w; in >> w;) {
    const bool unit = w == "B" || w == "KiB" || w == "MiB" || w == "GiB" || w == "TiB";
    if (unit && !out.empty() && !out.back().empty() &&
        std::isdigit(static_cast<unsigned char>(out.back().back())))
      out.back() += " " + w;
    else
      out.push_back(w);
  }
  return out;
}

/// "lesson.key first part, second part, ...", each word said once.
std::string readable_name(const std::vector<std::string>& parts) {
  std::string out = parts.empty() ? "" : parts.front();
  std::set<std::string> said;
  for (const auto& w : words_of(out)) said.insert(w);
  bool first = true;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    std::string kept;
    for (const auto& w : words_of(parts[i]))
      if (said.insert(w).second) kept += (kept.empty() ? "" : " ") + w;
    if (kept.empty()) continue;
    out += (first ? " " : ", ") + kept;
    first = false;
  }
  return out;
}

/// Where the walk is: the id's path and the readable name's parts.
struct place {
  std::string path;
  std::vector<std::string> name;
};

figure make_figure(std::string id, const kind& k, double value, double noise) {
  figure f;
  f.id = std::move(id);
  f.unit = k.unit;
  f.value = value;
  f.noise = noise;
  f.higher_better = k.higher_better;
  return f;
}

/// A figure's class from its summary and the samples kept beside it.
figure summary_figure(const place& at, const std::string& key, const kind& k, const json& v,
                      const json& parent) {
  auto f =
      make_figure(at.path + "." + key, k, v["median"].get<double>(), v["rel_spread"].get<double>());
  f.cls = class_of(v, parent.contains("seconds") ? parent["seconds"] : json(), k.unit, &f.samples,
                   &f.why);
  f.host_bound = parent.contains("memory") && parent["memory"] == "pageable";
  f.power_bound = parent.contains("peak_flops_per_s");
  return f;
}

void walk(const json& j, const place& at, std::vector<figure>& out);

void walk_key(const json& j, const std::string& key, const json& v, const place& at,
              bool has_bandwidth, std::vector<figure>& out) {
  place next{at.path + "." + key, at.name};
  if (next.name.size() == 1 && next.name.front().find('.') == std::string::npos)
    next.name.front() += "." + key;  // "transfer" -> "transfer.sweep"
  else if (!v.is_array())
    next.name.push_back(readable_key(key));  // a list is named by its elements
  const auto k = kind_of(key);
  std::optional<figure> f;
  if (is_summary(v)) {
    if (!k || (std::string(k->unit) == "s" && has_bandwidth)) return;
    f = summary_figure(at, key, *k, v, j);
  } else if (v.is_number() && k) {
    f = make_figure(next.path, *k, v.get<double>(), 0.0);
    f->why = "a single observation";
  } else if (v.is_object() || v.is_array()) {
    const std::size_t first = out.size();
    walk(v, next, out);
    if (key == "timeline")  // points in time, not how fast: README, "Comparing runs"
      for (std::size_t i = first; i < out.size(); ++i) {
        out[i].cls = figure_class::not_compared;
        out[i].why = "a timeline";
      }
    if (key == "variants")  // alternatives tried beside the configured choice, which is the gate
      for (std::size_t i = first; i < out.size(); ++i)
        if (out[i].cls == figure_class::gate) {
          out[i].cls = figure_class::informational;
          out[i].why = "a variant of the configured choice";
        }
    return;
  }
  if (!f) return;
  f->name = readable_name(next.name);
  out.push_back(std::move(*f));
}

void walk(const json& j, const place& at, std::vector<figure>& out) {
  if (j.is_array()) {
    std::map<std::string, int> seen;
    for (std::size_t i = 0; i < j.size(); ++i) {
      std::string id = identity(j[i], i), name = readable_identity(j[i], i);
      if (const int n = seen[id]++; n > 0) {
        id += "#" + std::to_string(n + 1);
        name += " #" + std::to_string(n + 1);
      }
      place next{at.path + "[" + id + "]", at.name};
      next.name.push_back(std::move(name));
      walk(j[i], next, out);
    }
    return;
  }
  if (!j.is_object()) return;
  bool has_bandwidth = false;
  for (const auto& [k, v] : j.items())
    if (ends_with(k, "bytes_per_s") && !skipped(k)) has_bandwidth = true;
  for (const auto& [key, v] : j.items())
    if (!skipped(key)) walk_key(j, key, v, at, has_bandwidth, out);
}

/// Whether a figure's id lies under a "d2d" member ("transfer.d2d[256 MiB].bandwidth_bytes_per_s").
bool is_d2d(const std::string& id) {
  for (std::size_t at = id.find(".d2d"); at != std::string::npos; at = id.find(".d2d", at + 1))
    if (const std::size_t end = at + 4; end == id.size() || id[end] == '.' || id[end] == '[')
      return true;
  return false;
}

std::optional<std::string> gpu_of(const lessons::run_record& r, std::string* driver) {
  try {
    const auto f = lessons::facts_of(r);
    if (driver) *driver = f.device.driver_version.value_or("");
    return f.device.name;
  } catch (const format_error&) {
    return std::nullopt;
  }
}

}  // namespace

static_assert(stopping_rule{}.timeout_floor >= static_cast<int>(kMinGateSamples),
              "a figure cut by the timeout keeps enough samples to be a gate");

figure_class class_of(const json& summary, const json& seconds, const std::string& unit,
                      std::vector<double>* samples, std::string* why) {
  const auto say = [&](std::string w) {
    if (why) *why = std::move(w);
    return figure_class::informational;
  };
  if (!seconds.is_array() || seconds.empty()) return say("no samples kept");
  const auto s = samples_in_unit(summary, seconds, unit);
  if (!s) return say("samples do not match the summary");
  if (s->size() < kMinGateSamples) return say(fmt::format("{} samples", s->size()));
  if (samples) *samples = *s;
  if (why) why->clear();
  return figure_class::gate;
}

std::vector<figure> figures_of(const lessons::run_record& r) {
  std::vector<figure> out;
  for (const auto& [lesson, result] : r.results) walk(result, place{lesson, {lesson}}, out);
  for (auto& f : out)  // a saved D2D rate is the copy's own (units.hpp, Note [D2D convention])
    if (f.unit == "bytes/s" && is_d2d(f.id)) f.name += fmt::format(" ({})", kD2dCopied);
  std::map<std::string, int> seen;  // names stay unique, as ids are
  for (auto& f : out)
    if (const int n = seen[f.name]++; n > 0) f.name += fmt::format(" #{}", n + 1);
  return out;
}

const char* to_string(figure_class c) noexcept {
  switch (c) {
    case figure_class::gate:
      return "gate";
    case figure_class::informational:
      return "informational";
    case figure_class::not_compared:
      return "not compared";
  }
  return "?";
}

const char* to_string(change c) noexcept {
  switch (c) {
    case change::worse:
      return "worse";
    case change::same:
      return "same";
    case change::better:
      return "better";
  }
  return "?";
}

judgement judge(double base, double base_noise, double value, double value_noise,
                bool higher_better, double threshold) {
  GPU_BASICS_EXPECTS(base > 0 && std::isfinite(base) && std::isfinite(value),
                     "judge: the baseline must be a positive number and the new value finite");
  judgement j;
  j.delta = value / base - 1;
  j.tolerance = std::max({threshold, std::abs(base_noise), std::abs(value_noise)});
  if (std::abs(j.delta) <= j.tolerance)
    j.verdict = change::same;
  else
    j.verdict = (j.delta > 0) == higher_better ? change::better : change::worse;
  return j;
}

namespace {

std::size_t count_in(const std::vector<figure_verdict>& rows, change c) {
  return static_cast<std::size_t>(std::count_if(
      rows.begin(), rows.end(), [&](const figure_verdict& v) { return v.j.verdict == c; }));
}

}  // namespace

std::size_t comparison::count(change c) const {
  return count_in(rows, c);
}

std::size_t comparison::count_informational(change c) const {
  return count_in(informational, c);
}

void ensure_comparable(const lessons::run_record& base, const std::string& base_name,
                       const lessons::run_record& next, const std::string& next_name, bool force) {
  const std::string both = base_name + " and " + next_name;
  if (base.schema_version != next.schema_version)
    throw format_error(fmt::format(
        "{}: results of schema {} and {} are not compared; rewrite the older one in the current "
        "schema with 'gpu-basics show OLD.json --json NEW.json'",
        both, base.schema_version, next.schema_version));
  if (base.command != next.command)
    throw format_error(
        fmt::format("{}: results of different commands ('{}' and '{}') are not "
                    "compared",
                    both, base.command, next.command));
  std::string d1, d2;
  const auto g1 = gpu_of(base, &d1), g2 = gpu_of(next, &d2);
  const auto major = [](const std::string& v) { return v.substr(0, v.find('.')); };
  if (!force && g1 && g2 && *g1 != *g2)
    throw format_error(
        fmt::format("refusing to compare {}: different GPU models ({} and {}); "
                    "--force compares them anyway",
                    both, *g1, *g2));
  if (!force && !d1.empty() && !d2.empty() && major(d1) != major(d2))
    throw format_error(
        fmt::format("refusing to compare {}: different driver major versions ({} "
                    "and {}); --force compares them anyway",
                    both, d1, d2));
}

namespace {

/// The gate rule over every gate at once: Holm's correction needs all the p-values.
void judge_gates(std::vector<figure_verdict>& gates, double threshold) {
  std::vector<double> pw, pb;
  for (auto& g : gates) {
    g.j.tolerance = g.base.host_bound    ? std::max(threshold, kHostBoundThreshold)
                    : g.base.power_bound ? std::max(threshold, kPowerBoundThreshold)
                                         : threshold;
    g.j.p_worse = p_worse(g.base.samples, g.next.samples, g.base.higher_better, g.j.tolerance);
    g.j.p_better = p_better(g.base.samples, g.next.samples, g.base.higher_better, g.j.tolerance);
    pw.push_back(*g.j.p_worse);
    pb.push_back(*g.j.p_better);
  }
  const auto worse = holm_reject(pw, kCompareAlpha), better = holm_reject(pb, kCompareAlpha);
  for (std::size_t i = 0; i < gates.size(); ++i)
    gates[i].j.verdict = worse[i] ? change::worse : better[i] ? change::better : change::same;
}

/// Gates too thinly sampled to ever be found worse among the others (smallest_p) become
/// informational, the least sampled first: each one out raises the others' Holm level.
void undecidable_to_informational(comparison& c) {
  const auto least = [](const figure_verdict& v) {
    return smallest_p(v.base.samples.size(), v.next.samples.size());
  };
  while (!c.rows.empty()) {
    const auto it =
        std::max_element(c.rows.begin(), c.rows.end(),
                         [&](const auto& x, const auto& y) { return least(x) < least(y); });
    const std::size_t gates = c.rows.size();
    if (least(*it) <= kCompareAlpha / static_cast<double>(gates)) return;
    figure_verdict v = std::move(*it);
    c.rows.erase(it);
    v.base.cls = figure_class::informational;
    v.base.why = fmt::format("{} and {} samples cannot show a change among {} gates",
                             v.base.samples.size(), v.next.samples.size(), gates);
    c.informational.push_back(std::move(v));
  }
}

void sort_worst_first(std::vector<figure_verdict>& rows) {
  const auto gain = [](const figure_verdict& v) {
    return v.base.higher_better ? v.j.delta : -v.j.delta;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& x, const auto& y) {
    if (x.j.verdict != y.j.verdict) return x.j.verdict < y.j.verdict;
    return gain(x) < gain(y);
  });
}

}  // namespace

namespace {

/// environment.host_cpu of a run, lesson by lesson; a record without it (or an unreadable one)
/// has none.
std::map<std::string, host_cpu_load> host_cpu_of(const lessons::run_record& r) {
  std::map<std::string, host_cpu_load> out;
  const auto it = r.environment.find("host_cpu");
  if (it == r.environment.end() || !it->is_object()) return out;
  for (const auto& [lesson, v] : it->items()) {
    try {
      out.emplace(lesson, v.get<host_cpu_load>());
    } catch (const json_path_error&) {  // leave that lesson out and judge the rest
    }
  }
  return out;
}

std::vector<host_cpu_pair> host_cpu_pairs(const lessons::run_record& base,
                                          const lessons::run_record& next) {
  std::vector<host_cpu_pair> out;
  const auto a = host_cpu_of(base), b = host_cpu_of(next);
  for (const auto& [lesson, l] : a)
    if (const auto it = b.find(lesson); it != b.end()) out.push_back({lesson, l, it->second});
  return out;
}

}  // namespace

comparison compare(const lessons::run_record& base, const lessons::run_record& next,
                   double threshold) {
  GPU_BASICS_EXPECTS(threshold >= 0 && threshold < 1, "compare: threshold outside [0, 1)");
  comparison c;
  c.threshold = threshold;
  const auto a = figures_of(base), b = figures_of(next);
  std::map<std::string, const figure*> by_id;
  for (const auto& f : b) by_id.emplace(f.id, &f);
  std::size_t matched = 0;
  for (const auto& f : a) {
    const auto it = by_id.find(f.id);
    if (it == by_id.end()) {
      ++c.only_in_baseline;
      continue;
    }
    ++matched;
    const figure& n = *it->second;
    if (f.cls == figure_class::not_compared || n.cls == figure_class::not_compared) {
      ++c.not_compared;
      continue;
    }
    if (!(f.value > 0) || !std::isfinite(n.value)) continue;  // nothing to scale by
    figure_verdict v{f, n, judge(f.value, f.noise, n.value, n.noise, f.higher_better, threshold)};
    if (f.cls == figure_class::gate && n.cls == figure_class::gate) {
      c.rows.push_back(std::move(v));
      continue;
    }
    v.base.cls = figure_class::informational;  // a gate needs samples on both sides
    if (v.base.why.empty()) v.base.why = "the new run " + n.why;
    c.informational.push_back(std::move(v));
  }
  c.only_in_new = b.size() - matched;
  c.host_cpu = host_cpu_pairs(base, next);
  undecidable_to_informational(c);
  judge_gates(c.rows, threshold);
  sort_worst_first(c.rows);
  sort_worst_first(c.informational);
  return c;
}

std::string format_value(double v, const std::string& unit) {
  if (unit == "bytes/s") return fmt::format("{:.4g} GB/s", v * 1e-9);
  if (unit == "flop/s") return fmt::format("{:.4g} TFLOP/s", v * 1e-12);
  if (unit == "fraction") return fmt::format("{:.3g}%", v * 100);
  if (unit == "s") {
    if (v >= 1) return fmt::format("{:.4g} s", v);
    if (v >= 1e-3) return fmt::format("{:.4g} ms", v * 1e3);
    if (v >= 1e-6) return fmt::format("{:.4g} us", v * 1e6);
    return fmt::format("{:.4g} ns", v * 1e9);
  }
  return fmt::format("{:.4g} {}", v, unit);
}

std::vector<std::string> host_load_notes(const comparison& c) {
  std::vector<std::string> out;
  for (const auto& h : c.host_cpu) {
    const std::string prefix = h.lesson + ".";
    std::size_t worse = 0;
    for (const auto& r : c.rows)
      worse += r.j.verdict == change::worse && r.base.host_bound && r.base.id.starts_with(prefix);
    if (!worse) continue;
    const auto pct = [](double share) { return fmt::format("{:.1f}%", 100 * share); };
    const std::string load = fmt::format(
        "during {}, CPU time stolen by the hypervisor {} -> {}, taken by other processes {} -> "
        "{} (of {} and {} CPUs)",
        h.lesson, pct(h.base.steal), pct(h.next.steal), pct(h.base.others), pct(h.next.others),
        h.base.cpus, h.next.cpus);
    const double busier = h.next.steal + h.next.others - h.base.steal - h.base.others;
    out.push_back(
        busier > kBusierHostShare
            ? fmt::format("Host load: {} host-bound gate(s) worse while the host was busier ({}): "
                          "pageable copies and memcpy share the CPUs and memory with that load, "
                          "so re-run on a quiet host before blaming the node.",
                          worse, load)
            : fmt::format("Host load: {} host-bound gate(s) worse and the host was not busier "
                          "({}): the loss is the node's own as far as the CPU counters show (a "
                          "neighbour's memory traffic does not show in them).",
                          worse, load));
  }
  return out;
}

namespace {

std::string p_text(const std::optional<double>& p) {
  return p ? fmt::format("{:.2g}", *p) : std::string("-");
}

/// A table of figures: figure, baseline, new, change %, then `tail`.
presentation::table figure_table(std::string id, std::string title,
                                 std::vector<presentation::column> tail) {
  presentation::table t;
  t.id = std::move(id);
  t.title = std::move(title);
  t.columns = {
      {"figure", "figure"}, {"baseline", "baseline"}, {"new", "new"}, {"change", "change %", 1, 1}};
  t.columns.insert(t.columns.end(), tail.begin(), tail.end());
  return t;
}

std::vector<presentation::value> figure_row(const figure_verdict& r,
                                            std::vector<presentation::value> tail) {
  std::vector<presentation::value> row{r.base.name, format_value(r.base.value, r.base.unit),
                                       format_value(r.next.value, r.next.unit), r.j.delta * 100};
  row.insert(row.end(), tail.begin(), tail.end());
  return row;
}

}  // namespace

presentation::table comparison_table(const comparison& c, const std::string& title) {
  auto t = figure_table(
      "compare", title,
      {{"tolerance", "threshold %", 1, 1}, {"p_worse", "p (worse)"}, {"verdict", "verdict"}});
  for (const auto& r : c.rows)
    t.add_row(figure_row(
        r, {r.j.tolerance * 100, p_text(r.j.p_worse), std::string(to_string(r.j.verdict))}));
  t.notes.push_back(fmt::format(
      "Gates: {} worse, {} same, {} better. A gate is worse when its samples show a loss beyond "
      "the threshold ({:.1f}%, {:.0f}% for copies through pageable host memory, {:.0f}% for GEMMs "
      "at the GPU's power limit): a one-sided "
      "Mann-Whitney test against the baseline moved by the threshold, Holm-corrected over the {} "
      "gates at a {:.0f}% family-wise false-alarm rate. Only gates decide the exit code.",
      c.count(change::worse), c.count(change::same), c.count(change::better), c.threshold * 100,
      kHostBoundThreshold * 100, kPowerBoundThreshold * 100, c.rows.size(), c.alpha * 100));
  t.notes.push_back(fmt::format(
      "Informational: {} figure(s) that are not gates (single observations, figures without "
      "samples on both sides or with too few to decide, staging variants; {} changed beyond "
      "max({:.1f}%, their noise), listed apart with why); {} timeline point(s) not compared.",
      c.informational.size(),
      c.count_informational(change::worse) + c.count_informational(change::better),
      c.threshold * 100, c.not_compared));
  for (auto& line : host_load_notes(c)) t.notes.push_back(std::move(line));
  if (c.only_in_baseline || c.only_in_new)
    t.notes.push_back(
        fmt::format("{} figure(s) only in the baseline and {} only in the new run "
                    "were not compared.",
                    c.only_in_baseline, c.only_in_new));
  return t;
}

presentation::table informational_table(const comparison& c) {
  auto t = figure_table(
      "compare_informational", "Informational changes (not gated)",
      {{"tolerance", "same within %", 1, 1}, {"change_kind", "change"}, {"why", "why not a gate"}});
  for (const auto& r : c.informational)
    if (r.j.verdict != change::same)
      t.add_row(
          figure_row(r, {r.j.tolerance * 100, std::string(to_string(r.j.verdict)), r.base.why}));
  t.notes.push_back(fmt::format(
      "{} of {} informational figure(s) changed beyond max({:.1f}%, the IQR/median noise of "
      "either run): single observations, counts and summaries kept without samples cannot tell "
      "a change from noise, so they never decide the exit code.",
      t.rows.size(), c.informational.size(), c.threshold * 100));
  return t;
}

namespace {

json row_json(const figure_verdict& r) {
  json j = {{"id", r.base.id},
            {"name", r.base.name},
            {"class", to_string(r.base.cls)},
            {"unit", r.base.unit},
            {"higher_better", r.base.higher_better},
            {"baseline", r.base.value},
            {"baseline_noise", r.base.noise},
            {"baseline_samples", r.base.samples.size()},
            {"new", r.next.value},
            {"new_noise", r.next.noise},
            {"new_samples", r.next.samples.size()},
            {"delta", r.j.delta},
            {"tolerance", r.j.tolerance},
            {"verdict", to_string(r.j.verdict)}};
  if (r.j.p_worse) j["p_worse"] = *r.j.p_worse;
  if (r.j.p_better) j["p_better"] = *r.j.p_better;
  if (r.base.cls != figure_class::gate) j["why"] = r.base.why;
  return j;
}

}  // namespace

json to_json(const comparison& c) {
  json rows = json::array(), info = json::array();
  for (const auto& r : c.rows) rows.push_back(row_json(r));
  for (const auto& r : c.informational) info.push_back(row_json(r));
  json host = json::object();
  for (const auto& h : c.host_cpu) host[h.lesson] = {{"baseline", h.base}, {"new", h.next}};
  return {{"threshold", c.threshold},
          {"host_bound_threshold", kHostBoundThreshold},
          {"power_bound_threshold", kPowerBoundThreshold},
          {"alpha", c.alpha},
          {"worse", c.count(change::worse)},
          {"same", c.count(change::same)},
          {"better", c.count(change::better)},
          {"only_in_baseline", c.only_in_baseline},
          {"only_in_new", c.only_in_new},
          {"not_compared", c.not_compared},
          {"figures", rows},
          {"informational",
           {{"worse", c.count_informational(change::worse)},
            {"same", c.count_informational(change::same)},
            {"better", c.count_informational(change::better)},
            {"figures", info}}},
          {"host_cpu", host}};
}

}  // namespace gpu_basics::verdict

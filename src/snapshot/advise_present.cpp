// advise's presentation: the tables (the recommendation with the line to use, the fit table, the
// stranded split, the searched policies ranked) drawn from an advice, pure.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics {

namespace {

double mib(std::size_t b) {
  return static_cast<double>(b) * kPerMiB;
}

std::size_t fitting_count(const advice& a, std::size_t k) {
  return static_cast<std::size_t>(std::count_if(a.policies.begin(), a.policies.end(),
                                                [&](const auto& p) { return p.fits[k].fits(); }));
}

}  // namespace

namespace {

/// `s` as one shell word: as it is when every character is plain, else in single quotes.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_:.,-+/=").find(c) != std::string_view::npos;
  });
  if (plain) return s;
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string torch_env_line(const std::string& conf) {
  return conf.empty() ? std::string("unset PYTORCH_CUDA_ALLOC_CONF")
                      : "export PYTORCH_CUDA_ALLOC_CONF=" + shell_word(printable(conf));
}

std::string fraction_text(std::size_t limit, std::size_t device_memory) {
  if (device_memory == 0) return "1";
  // Millionths: floor(limit / memory) + 2, so fraction * memory passes the limit by at least one
  // millionth of the memory (no rounding of a double brings it back below) and by two at most.
  if (limit >= device_memory || device_memory > (std::size_t{1} << 50)) return "1";
  // limit < memory: floor(limit * 10^6 / memory) a thousand at a time, exactly.
  const std::size_t m1 = limit * 1000 / device_memory, r1 = limit * 1000 % device_memory;
  const std::size_t millionths = m1 * 1000 + r1 * 1000 / device_memory + 2;
  if (millionths >= 1000000u) return "1";
  std::string t = fmt::format("0.{:06}", millionths);
  while (t.back() == '0') t.pop_back();
  return t;
}

recommendation_lines lines_of(const advice& a) {
  recommendation_lines l;
  l.conf = a.policies.at(a.recommended).conf;
  if (!a.line_limit) {
    l.torch = torch_env_line(l.conf);
    l.gbt = l.conf.empty() ? "gbt.use()" : "gbt.use(conf=\"" + printable(l.conf) + "\")";
    return l;
  }
  const std::string key = (l.conf.empty() ? "" : ",") + std::string("per_process_memory_fraction:");
  if (a.device_memory) {
    l.conf += key + fraction_text(*a.line_limit, *a.device_memory);
    l.torch = torch_env_line(l.conf);
    l.gbt = "gbt.use(conf=\"" + printable(l.conf) + "\")";
    return l;
  }
  // The same arithmetic as fraction_text, by the PyTorch that will run the job.
  const std::string f = fmt::format(
      "$(python -c 'import torch; print(min(1.0, ({} * 10**6 // torch.cuda.mem_get_info()[1] + "
      "2) / 10**6))')",
      *a.line_limit);
  l.torch = "export PYTORCH_CUDA_ALLOC_CONF=" +
            (l.conf.empty() ? std::string() : shell_word(printable(l.conf))) + key + "\"" + f +
            "\"";
  l.conf += key + f;
  return l;
}

namespace {

/// "fits, 38 MiB to spare" (the limit less the smallest that fits) / "OOM at event 1234".
std::string fit_cell(const fit_outcome& f, const policy_detail& d, std::size_t k) {
  const std::size_t placements = d.smallest_by_placement.size();
  const bool counted = k < d.fits_in.size() && placements > 1;
  const std::size_t n = counted ? d.fits_in[k] : 0;
  if (f.fits() && (!counted || n == placements))
    return fmt::format("fits, {} to spare",
                       format_bytes(f.limit > d.smallest_limit ? f.limit - d.smallest_limit : 0));
  if (f.fits()) return fmt::format("fits in {} of {} placements", n, placements);
  return counted && n > 0 ? fmt::format("OOM at event {} (fits in {} of {} placements)",
                                        f.oom->event, n, placements)
                          : fmt::format("OOM at event {}", f.oom->event);
}

/// " Allocated at: file:line in f; ... (N more in the JSON)." for a request's Python frames,
/// innermost first ("" without frames).
/// The user's own frames are shown: Python files outside PyTorch's package, where there are
/// any (PyTorch's and C++ frames stay in the JSON).
std::string allocated_at(const std::vector<std::string>& frames) {
  constexpr std::size_t kShown = 4;
  if (frames.empty()) return "";
  std::vector<std::string> own;
  for (const auto& f : frames) {
    const std::string file = f.substr(0, f.find(':'));
    if (file.ends_with(".py") && file.find("packages/torch/") == std::string::npos)
      own.push_back(f);
  }
  const std::vector<std::string>& shown = own.empty() ? frames : own;
  std::string n = " Allocated at:";
  for (std::size_t k = 0; k < shown.size() && k < kShown; ++k) n += " " + printable(shown[k]) + ";";
  n.pop_back();
  if (const std::size_t rest = frames.size() - std::min(shown.size(), kShown); rest != 0)
    n += fmt::format(" ({} more frames in the JSON)", rest);
  return n + ".";
}

std::string oom_note(const std::string& who, const fit_outcome& f) {
  const oom_point& o = *f.oom;
  std::string n = fmt::format(
      "{} under {}: out of memory at event {}, a request of {:.1f} MiB on stream {:#x}; "
      "after freeing the cache: {:.1f} MiB allocated, {:.1f} MiB reserved, largest free block "
      "{:.1f} MiB.",
      who, format_bytes(f.limit), o.event, mib(o.request_bytes), o.stream, mib(o.allocated),
      mib(o.reserved), mib(o.largest_free));
  return n + allocated_at(o.frames);
}

/// "812.0 MiB stranded at peak: 640.0 MiB too small, 172.0 MiB on stream 0x7" (largest first).
std::string stranded_sentence(const stranded_split& s) {
  std::vector<stranded_part> parts = s.parts;
  std::sort(parts.begin(), parts.end(),
            [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  std::string out = fmt::format("{:.1f} MiB reserved but free at peak", mib(s.free_bytes()));
  for (std::size_t i = 0; i < parts.size() && i < 3; ++i) {
    const auto& p = parts[i];
    out += (i == 0 ? ": " : ", ") + fmt::format("{:.1f} MiB ", mib(p.bytes));
    switch (p.cause) {
      case stranded_cause::other_stream:
        out += fmt::format("cached on stream {:#x}", p.stream);
        break;
      case stranded_cause::other_pool:
        out += s.small_pool ? "in large-pool segments" : "in small-pool segments";
        break;
      case stranded_cause::expandable_pages:
        out += "in free pages of expandable ranges";
        break;
      case stranded_cause::segment_rest:
        out += "the rest of the new segment";
        break;
      case stranded_cause::max_split:
        out += "in blocks max_split_size_mb keeps whole";
        break;
      case stranded_cause::too_small:
        out += "in blocks too small for the request";
        break;
      case stranded_cause::unexplained:
        out += "unexplained";
        break;
    }
  }
  return out;
}

/// The least and the largest of the placements' smallest limits (smallest_limit twice in advice
/// without them).
std::pair<std::size_t, std::size_t> placement_bounds(const policy_detail& d) {
  if (d.smallest_by_placement.empty()) return {d.smallest_limit, d.smallest_limit};
  const auto [lo, hi] =
      std::minmax_element(d.smallest_by_placement.begin(), d.smallest_by_placement.end());
  return {*lo, *hi};
}

/// "1670-1718" (MiB) over the placements; the one limit where they agree.
std::string placement_range(const policy_detail& d) {
  const auto [lo, hi] = placement_bounds(d);
  return lo == hi ? fmt::format("{:.0f}", mib(lo)) : fmt::format("{:.0f}-{:.0f}", mib(lo), mib(hi));
}

/// The largest less the least of the placements' smallest limits.
std::size_t spread(const policy_detail& d) {
  const auto [lo, hi] = placement_bounds(d);
  return hi - lo;
}

/// Reserved but free at the first peaks of reserved and of allocated, defaults and
/// recommendation side by side, split by cause.
presentation::table stranded_table(const advice& a) {
  presentation::table s;
  s.id = "stranded";
  s.title =
      "Reserved but free at peak reserved and at peak allocated, by why the request then "
      "could not use it";
  s.columns = {
      {"cause", "cause"},
      {"defaults_bytes", "defaults at peak reserved MiB", kPerMiB, 1},
      {"recommended_bytes", "recommended at peak reserved MiB", kPerMiB, 1},
      {"defaults_allocated_peak_bytes", "defaults at peak allocated MiB", kPerMiB, 1},
      {"recommended_allocated_peak_bytes", "recommended at peak allocated MiB", kPerMiB, 1}};
  const std::array<const stranded_split*, 4> at = {&a.defaults.stranded, &a.recommendation.stranded,
                                                   &a.defaults.stranded_at_allocated,
                                                   &a.recommendation.stranded_at_allocated};
  const auto row = [&](std::string label, auto bytes) {
    std::vector<presentation::value> r = {std::move(label)};
    bool any = false;
    for (const auto* x : at) {
      const std::size_t b = bytes(*x);
      any = any || b > 0;
      r.emplace_back(static_cast<std::int64_t>(b));
    }
    if (any) s.add_row(std::move(r));
  };
  for (stranded_cause c :
       {stranded_cause::other_stream, stranded_cause::other_pool, stranded_cause::expandable_pages,
        stranded_cause::segment_rest, stranded_cause::max_split, stranded_cause::too_small,
        stranded_cause::unexplained})
    row(std::string(to_string(c)), [c](const stranded_split& x) { return x.bytes_of(c); });
  row("total free (reserved - allocated)", [](const stranded_split& x) { return x.free_bytes(); });
  row("rounding inside allocated blocks",
      [](const stranded_split& x) { return x.rounding_bytes(); });
  for (const auto* x : {at[0], at[1]})
    s.notes.push_back(fmt::format(
        "{}: peak reserved {:.1f} MiB first reached at event {}, by a request of {:.1f} MiB "
        "({:.1f} MiB rounded, {} pool) on stream {:#x} that no free block could serve; {}.{}",
        x == at[0] ? "Defaults" : "Recommended", mib(x->reserved), x->event, mib(x->request_bytes),
        mib(x->rounded_bytes), x->small_pool ? "small" : "large", x->stream, stranded_sentence(*x),
        allocated_at(x->frames)));
  for (const auto* x : {at[2], at[3]})
    s.notes.push_back(fmt::format(
        "{}: peak allocated {:.1f} MiB first reached at event {} ({:.1f} MiB reserved then).{}",
        x == at[2] ? "Defaults" : "Recommended", mib(x->allocated), x->event, mib(x->reserved),
        allocated_at(x->frames)));
  return s;
}

/// The events that grew reserved most beyond what the live blocks needed, up to peak reserved.
presentation::table growth_table(const advice& a) {
  presentation::table g;
  g.id = "growth";
  g.title = "The events that grew reserved beyond what live blocks needed, up to peak reserved";
  g.columns = {{"policy", "policy"},
               {"event", "event"},
               {"request_bytes", "request MiB", kPerMiB, 2},
               {"grew_bytes", "reserved grew MiB", kPerMiB, 1},
               {"beyond_need_bytes", "beyond need MiB", kPerMiB, 1},
               {"free_before_bytes", "free before MiB", kPerMiB, 1},
               {"cause", "why the free bytes could not serve it"}};
  for (const auto* d : {&a.defaults, &a.recommendation}) {
    if (d == &a.recommendation && a.recommendation.index == a.defaults.index) break;
    const std::string who = d == &a.defaults ? "defaults" : "recommended";
    for (const auto& e : d->growth)
      g.add_row({who, static_cast<std::int64_t>(e.event),
                 static_cast<std::int64_t>(e.request_bytes),
                 static_cast<std::int64_t>(e.grew_bytes), static_cast<std::int64_t>(e.excess_bytes),
                 static_cast<std::int64_t>(e.free_before), std::string(to_string(e.cause))});
  }
  g.notes.push_back(
      "Each event took a new segment while reserved memory already held at least the live "
      "blocks, but not where the request could use it. Beyond need: reserved after the event "
      "less the larger of reserved before it and allocated after it (later requests may fill "
      "it); the five largest per policy, up to peak reserved.");
  return g;
}

}  // namespace

std::vector<presentation::table> advice_tables(const advice& a) {
  using presentation::value;
  std::vector<presentation::table> out;
  const policy_outcome& d = a.policies[a.defaults.index];
  const policy_outcome& r = a.policies[a.recommended];
  const auto peak = [](const policy_outcome& p) -> value {
    if (!p.result) return value{};
    return static_cast<std::int64_t>(p.result->peak_reserved);
  };

  presentation::table t;
  t.id = "advice";
  t.title = fmt::format("Advice for {} (device {}, {} trace events, {} policies searched)", a.file,
                        a.device, a.trace_events, a.policies.size());
  t.columns = {{"policy", "policy"},
               {"conf", "PYTORCH_CUDA_ALLOC_CONF"},
               {"peak_reserved_bytes", "peak reserved MiB", kPerMiB, 1},
               {"smallest_limit_bytes", "smallest limit that fits MiB", kPerMiB, 0},
               {"smallest_by_placement", "by placement MiB"},
               {"stranded_bytes", "free at peak MiB", kPerMiB, 1}};
  t.add_row({std::string("defaults"), policy_label(d.conf), peak(d),
             static_cast<std::int64_t>(a.defaults.smallest_limit), placement_range(a.defaults),
             static_cast<std::int64_t>(a.defaults.stranded.free_bytes())});
  // The recommendation as its line runs it: under the fraction it sets, where it sets one.
  const auto tight = a.tightest_fit();
  const recommendation_lines lines = lines_of(a);
  t.add_row({std::string("recommended"), policy_label(lines.conf),
             a.line_limit && tight ? value{static_cast<std::int64_t>(r.fits[*tight].peak_reserved)}
                                   : peak(r),
             static_cast<std::int64_t>(a.recommendation.smallest_limit),
             placement_range(a.recommendation),
             static_cast<std::int64_t>(a.recommendation.stranded.free_bytes())});
  if (a.failed_request)
    t.notes.push_back(fmt::format(
        "The snapshot ends in a request of {:.2f} MiB that ran out of memory: it is replayed as "
        "the trace's last allocation, so each policy is asked whether it would have served it "
        "too. The trace covers the job only up to that request.",
        mib(*a.failed_request)));
  t.notes.push_back(
      fmt::format("Live bytes (as requested) peak at {:.1f} MiB: no limit below "
                  "that can fit, whatever the policy.",
                  mib(a.live_peak)));
  if (a.recommended == a.defaults.index) {
    t.notes.push_back(
        a.fit_limits.empty()
            ? "The defaults are the best: no searched policy reserves a page less at peak."
            : "The defaults are the simplest policy that fits the tightest limit given.");
  } else if (const auto k = a.tightest_fit()) {
    const fit_outcome& fd = d.fits[*k];
    t.notes.push_back(fmt::format(
        "Why: under {}, the tightest limit given that a policy fits, the defaults {}; {} fits "
        "(of {} policies that fit it with the replay's ascending addresses, the one with the "
        "fewest keys that fits under every placement, where one does). Its smallest limit is {} "
        "against the defaults' {}. At peak without a limit the defaults leave {}.",
        a.fit_label(*k),
        fd.fits() ? std::string("fit")
                  : fmt::format("run out of memory at event {}", fd.oom->event),
        policy_label(r.conf), fitting_count(a, *k), format_bytes(a.recommendation.smallest_limit),
        format_bytes(a.defaults.smallest_limit), stranded_sentence(a.defaults.stranded)));
  } else if (d.result && r.result) {
    const auto saved = static_cast<std::int64_t>(d.result->peak_reserved) -
                       static_cast<std::int64_t>(r.result->peak_reserved);
    t.notes.push_back(fmt::format(
        "Why: the defaults leave {}. {} reserves {:.1f} MiB at peak, {:.1f} MiB {} than the "
        "defaults, leaving {}; its smallest limit is {:.1f} MiB against the defaults' {:.1f} MiB.",
        stranded_sentence(a.defaults.stranded), policy_label(r.conf), mib(r.result->peak_reserved),
        mib(static_cast<std::size_t>(std::abs(saved))), saved >= 0 ? "less" : "more",
        stranded_sentence(a.recommendation.stranded), mib(a.recommendation.smallest_limit),
        mib(a.defaults.smallest_limit)));
  }
  t.notes.push_back("Use with PyTorch: " + lines.torch);
  t.notes.push_back(
      lines.gbt.empty()
          ? "Use with gpu-basics' allocator: gbt.use(conf=...) with the same conf and the "
            "fraction that command prints (or pass --device-memory to have it printed here)"
          : "Use with gpu-basics' allocator: " + lines.gbt);
  if (a.line_limit)
    t.notes.push_back(fmt::format(
        "The line sets a memory fraction of {} (per_process_memory_fraction, as torch.cuda."
        "set_per_process_memory_fraction would): {}{}",
        format_bytes(*a.line_limit),
        collects_without_fraction(a.policies[a.recommended].conf)
            ? "garbage_collection_threshold acts only under a fraction"
            : "without it this policy reserves more than the limit, on a device that has more",
        a.device_memory
            ? fmt::format(", of the {} device memory given.", format_bytes(*a.device_memory))
            : "; the command in it computes the fraction from the running GPU."));
  t.notes.push_back(fmt::format(
      "A limit is PyTorch's torch.cuda.set_per_process_memory_fraction(limit / device memory): "
      "reserved may not pass it; at the limit the cache is freed and the request retried, then "
      "torch.OutOfMemoryError. Smallest limits are bisected to {} MiB pages.",
      kAdvicePage / kMiB));
  const auto peaks = [](const policy_detail& x) {
    if (x.peak_by_placement.empty()) return std::string("n/a");
    const auto [lo, hi] =
        std::minmax_element(x.peak_by_placement.begin(), x.peak_by_placement.end());
    return *lo == *hi ? fmt::format("{:.0f} MiB", mib(*lo))
                      : fmt::format("{:.0f}-{:.0f} MiB", mib(*lo), mib(*hi));
  };
  const auto overlap = [&] {
    const auto& dp = a.defaults.peak_by_placement;
    const auto& rp = a.recommendation.peak_by_placement;
    if (a.recommended == a.defaults.index || dp.empty() || rp.empty()) return std::string();
    if (*std::max_element(rp.begin(), rp.end()) < *std::min_element(dp.begin(), dp.end()))
      return std::string(" The recommendation reserves less under every placement.");
    return std::string(
        " The ranges overlap: where the driver places the defaults' segments well and the "
        "recommendation's badly, a run can reserve as much with the recommendation.");
  };
  if (!a.defaults.peak_by_placement.empty())
    t.notes.push_back(fmt::format(
        "Peak reserved over the {} placements of segments: the defaults {}, the recommendation {} "
        "(the table gives the replay's ascending addresses){}{}",
        a.defaults.peak_by_placement.size(), peaks(a.defaults), peaks(a.recommendation),
        !a.tightest_fit()
            ? "; without a limit that one fits, policies are ranked by their worst placement."
            : ".",
        overlap()));
  if (const auto n = a.recommendation.smallest_by_placement.size(); n > 1)
    t.notes.push_back(fmt::format(
        "A smallest limit can hang on where the CUDA driver places segments: among free blocks "
        "of one size the allocator takes the lowest address. Each was bisected under {} "
        "placements (the replay's ascending addresses, descending, {} shuffled); the table gives "
        "the limit that fits under all of them, and beside it their range{}",
        n, n - 2,
        spread(a.defaults) + spread(a.recommendation) == 0
            ? std::string(": here every placement gave the same limits.")
        : a.recommended == a.defaults.index
            ? fmt::format(". The defaults' limits span {:.0f} MiB over them: plan for the "
                          "table's limit.",
                          mib(spread(a.defaults)))
            : fmt::format(". The defaults' limits span {:.0f} MiB over them, the "
                          "recommendation's {:.0f} MiB: plan for the table's limit.",
                          mib(spread(a.defaults)), mib(spread(a.recommendation)))));
  if (r.conf.find("expandable_segments:True") != std::string::npos)
    t.notes.push_back(
        "Expandable segments grow inside address ranges reserved once, which every placement "
        "lays out alike: for the recommendation the placements do not vary.");
  out.push_back(std::move(t));

  if (!a.fit_limits.empty()) {
    presentation::table f;
    f.id = "fit";
    f.title = "Will it fit? Each limit replayed under the defaults and the recommendation";
    f.columns = {{"limit", "limit"},
                 {"defaults", "defaults"},
                 {"recommended", "recommended"},
                 {"simplest_fitting", "simplest policy that fits"}};
    for (std::size_t k = 0; k < a.fit_limits.size(); ++k) {
      const auto& c = a.fit_choice[k];
      f.add_row({a.fit_label(k), fit_cell(d.fits[k], a.defaults, k),
                 fit_cell(r.fits[k], a.recommendation, k),
                 !c ? fmt::format("none of {} policies", a.policies.size())
                 : k < a.fit_choice_everywhere.size() && !a.fit_choice_everywhere[k]
                     ? policy_label(a.policies[*c].conf) + " (not under every placement)"
                     : policy_label(a.policies[*c].conf)});
      if (a.fit_limits[k] < a.live_peak)
        f.notes.push_back(fmt::format("{} cannot fit: live bytes alone peak at {}.", a.fit_label(k),
                                      format_bytes(a.live_peak)));
      else
        for (const auto& [who, p] :
             {std::pair{"The defaults", &d}, std::pair{"The recommendation", &r}})
          if (!p->fits[k].fits() && (p == &d || &r != &d))
            f.notes.push_back(oom_note(who, p->fits[k]));
    }
    out.push_back(std::move(f));
  }

  out.push_back(stranded_table(a));
  if (auto g = growth_table(a); !g.rows.empty()) out.push_back(std::move(g));

  presentation::table p;
  p.id = "policies";
  p.title = "The searched policies, by peak reserved (the first 12, the defaults and the user's)";
  p.columns = {{"conf", "policy"},
               {"knobs", "keys"},
               {"peak_reserved_bytes", "peak reserved MiB", kPerMiB, 1},
               {"vs_defaults", "vs defaults %", 100.0, 1},
               {"backend_allocations", "backend allocations"}};
  for (std::size_t k = 0; k < a.fit_limits.size(); ++k)
    p.columns.push_back({fmt::format("fits_{}", k), "under " + a.fit_label(k)});
  std::vector<std::size_t> order(a.policies.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const auto& px = a.policies[x];
    const auto& py = a.policies[y];
    if (!px.result || !py.result) return px.result.has_value() && !py.result.has_value();
    return std::tuple(px.result->peak_reserved, px.knobs) <
           std::tuple(py.result->peak_reserved, py.knobs);
  });
  const std::size_t searched = advise_confs().size();
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    const std::size_t i = order[rank];
    if (rank >= 12 && i != 0 && i < searched) continue;
    const auto& x = a.policies[i];
    std::vector<value> row = {policy_label(x.conf), static_cast<std::int64_t>(x.knobs), peak(x),
                              value{}, value{}};
    if (x.result) {
      if (d.result && d.result->peak_reserved > 0)
        row[3] = static_cast<double>(x.result->peak_reserved) /
                     static_cast<double>(d.result->peak_reserved) -
                 1.0;
      row[4] = x.result->backend_allocations;
    }
    for (const auto& f : x.fits) row.push_back(f.fits() ? std::string("fits") : std::string("OOM"));
    p.add_row(std::move(row));
  }
  p.notes.push_back(fmt::format(
      "{} policies replayed {} events each in {:.2f} s on {} threads. vs defaults: the change in "
      "peak reserved (negative is less), without a limit, as PyTorch runs a policy without a "
      "memory fraction. garbage_collection_threshold acts only under a fraction, so it is "
      "searched only under the --fit limits{}.",
      a.policies.size(), a.replay_events, a.seconds, a.threads,
      a.fit_limits.empty() ? " (none given: not searched)" : ""));
  out.push_back(std::move(p));
  return out;
}

}  // namespace gpu_basics

// advise's file: the advice as JSON and back, through documents that mirror the file's keys (the
// macros of core/json.hpp: a value that cannot be read is refused naming its key path), and the
// checks that what was read holds together.
#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/replay_json.hpp"

namespace gpu_basics {

namespace {

// ---- The documents: one struct per object of the file, members named as its keys.

struct oom_doc {
  std::size_t event = 0;
  std::size_t request_bytes = 0;
  stream_handle stream = 0;
  std::size_t allocated_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t largest_free_block_bytes = 0;
  std::vector<std::string> frames;
};
GPU_BASICS_JSON_STRICT(oom_doc, event, request_bytes, stream, allocated_bytes, reserved_bytes,
                       largest_free_block_bytes, frames)

struct fit_doc {
  std::size_t limit_bytes = 0;
  bool fits = true;
  std::size_t peak_reserved_bytes = 0;
  std::size_t headroom_bytes = 0;
  std::optional<oom_doc> oom;
};
GPU_BASICS_JSON_STRICT(fit_doc, limit_bytes, fits, peak_reserved_bytes, headroom_bytes, oom)

struct placement_doc {
  std::string placement;
  std::size_t bytes = 0;
};
GPU_BASICS_JSON_STRICT(placement_doc, placement, bytes)

/// A part of the stranded split: "stream" only for bytes cached on another stream.
struct part_doc {
  std::string cause;
  std::size_t bytes = 0;
  std::optional<stream_handle> stream;
};
void to_json(nlohmann::json& j, const part_doc& p) {
  j = {{"cause", p.cause}, {"bytes", p.bytes}};
  if (p.stream) j["stream"] = *p.stream;
}
void from_json(const nlohmann::json& j, part_doc& p) {
  require_json_object(j);
  p = {};
  read_required_member(j, "cause", p.cause);
  read_required_member(j, "bytes", p.bytes);
  read_member(j, "stream", p.stream);
}

struct stranded_doc {
  std::size_t event = 0;
  std::size_t request_bytes = 0;
  std::size_t rounded_bytes = 0;
  stream_handle stream = 0;
  bool small_pool = false;
  std::size_t reserved_bytes = 0;
  std::size_t allocated_bytes = 0;
  std::size_t requested_bytes = 0;
  std::size_t free_bytes = 0;
  std::size_t rounding_bytes = 0;
  std::vector<part_doc> parts;
};
GPU_BASICS_JSON_STRICT(stranded_doc, event, request_bytes, rounded_bytes, stream, small_pool,
                       reserved_bytes, allocated_bytes, requested_bytes, free_bytes, rounding_bytes,
                       parts)

/// An event that grew reserved beyond what live blocks needed.
struct growth_doc {
  std::size_t event = 0;
  std::size_t request_bytes = 0;
  std::size_t grew_bytes = 0;
  std::size_t beyond_need_bytes = 0;
  std::size_t free_before_bytes = 0;
  std::string cause;
  stream_handle stream = 0;
};
GPU_BASICS_JSON_STRICT(growth_doc, event, request_bytes, grew_bytes, beyond_need_bytes,
                       free_before_bytes, cause, stream)

struct curve_doc {
  std::vector<std::size_t> event;
  std::vector<std::size_t> reserved_bytes;
  std::vector<std::size_t> allocated_bytes;
};
GPU_BASICS_JSON_STRICT(curve_doc, event, reserved_bytes, allocated_bytes)

/// A detailed policy; the placements' figures are absent from advice saved before placements
/// were replayed.
struct detail_doc {
  std::string conf;
  std::size_t smallest_limit_bytes = 0;
  std::optional<std::vector<placement_doc>> smallest_limit_by_placement;
  std::optional<std::vector<std::size_t>> fits_in_placements;
  fit_doc below_smallest;
  std::vector<placement_doc> peak_reserved_by_placement;
  stranded_doc stranded;
  stranded_doc stranded_at_peak_allocated;
  /// The Python frames of the requests at peak reserved and at peak allocated (empty where the
  /// snapshot has none; absent from advice saved before frames were read).
  std::optional<std::vector<std::string>> peak_reserved_frames;
  std::optional<std::vector<std::string>> peak_allocated_frames;
  std::vector<growth_doc> growth;
  std::size_t growth_beyond_need_bytes = 0;
  curve_doc curve;
};
void to_json(nlohmann::json& j, const detail_doc& d) {
  j = {{"conf", d.conf},
       {"smallest_limit_bytes", d.smallest_limit_bytes},
       {"smallest_limit_by_placement",
        d.smallest_limit_by_placement.value_or(std::vector<placement_doc>{})},
       {"fits_in_placements", d.fits_in_placements.value_or(std::vector<std::size_t>{})},
       {"below_smallest", d.below_smallest},
       {"peak_reserved_by_placement", d.peak_reserved_by_placement},
       {"stranded", d.stranded},
       {"stranded_at_peak_allocated", d.stranded_at_peak_allocated},
       {"peak_reserved_frames", d.peak_reserved_frames.value_or(std::vector<std::string>{})},
       {"peak_allocated_frames", d.peak_allocated_frames.value_or(std::vector<std::string>{})},
       {"growth", d.growth},
       {"growth_beyond_need_bytes", d.growth_beyond_need_bytes},
       {"curve", d.curve}};
}
void from_json(const nlohmann::json& j, detail_doc& d) {
  require_json_object(j);
  d = {};
  read_required_member(j, "conf", d.conf);
  read_required_member(j, "smallest_limit_bytes", d.smallest_limit_bytes);
  read_member(j, "smallest_limit_by_placement", d.smallest_limit_by_placement);
  read_member(j, "fits_in_placements", d.fits_in_placements);
  read_required_member(j, "below_smallest", d.below_smallest);
  read_required_member(j, "peak_reserved_by_placement", d.peak_reserved_by_placement);
  read_required_member(j, "stranded", d.stranded);
  read_required_member(j, "stranded_at_peak_allocated", d.stranded_at_peak_allocated);
  read_member(j, "peak_reserved_frames", d.peak_reserved_frames);
  read_member(j, "peak_allocated_frames", d.peak_allocated_frames);
  read_required_member(j, "growth", d.growth);
  read_required_member(j, "growth_beyond_need_bytes", d.growth_beyond_need_bytes);
  read_required_member(j, "curve", d.curve);
}

/// A searched policy: its peak figures only where its replay finished ("failure" null).
struct policy_doc {
  std::string conf;
  int keys = 0;
  std::optional<std::string> failure;
  std::size_t peak_reserved_bytes = 0;
  std::size_t peak_allocated_bytes = 0;
  std::int64_t backend_allocations = 0;
  double fragmentation_at_peak = 0;
  std::vector<fit_doc> fits;
};
void to_json(nlohmann::json& j, const policy_doc& p) {
  j = {{"conf", p.conf}, {"keys", p.keys}};
  if (!p.failure) {
    j["peak_reserved_bytes"] = p.peak_reserved_bytes;
    j["peak_allocated_bytes"] = p.peak_allocated_bytes;
    j["backend_allocations"] = p.backend_allocations;
    j["fragmentation_at_peak"] = p.fragmentation_at_peak;
  }
  j["failure"] = p.failure;
  j["fits"] = p.fits;
}
void from_json(const nlohmann::json& j, policy_doc& p) {
  require_json_object(j);
  p = {};
  read_required_member(j, "conf", p.conf);
  read_required_member(j, "keys", p.keys);
  read_required_member(j, "failure", p.failure);
  if (!p.failure) {
    read_required_member(j, "peak_reserved_bytes", p.peak_reserved_bytes);
    read_required_member(j, "peak_allocated_bytes", p.peak_allocated_bytes);
    read_required_member(j, "backend_allocations", p.backend_allocations);
    read_required_member(j, "fragmentation_at_peak", p.fragmentation_at_peak);
  }
  read_required_member(j, "fits", p.fits);
}

struct recorded_doc {
  std::optional<std::string> alloc_conf;
  std::uint64_t peak_reserved_bytes = 0;
  std::size_t ooms = 0;
};
GPU_BASICS_JSON_STRICT(recorded_doc, alloc_conf, peak_reserved_bytes, ooms)

/// The recommendation as printed: `conf` the searched policy, `use_conf` the conf its lines set
/// (with the memory fraction, where one is needed), `torch_env` and `gbt` the lines themselves.
struct recommended_doc {
  std::string conf;
  std::string use_conf;
  std::string torch_env;
  std::string gbt;
};
GPU_BASICS_JSON_STRICT(recommended_doc, conf, use_conf, torch_env, gbt)

/// The file. "tables" is written for readers of the file (the report draws them) and not read
/// back: advice_tables() makes them again.
struct advice_doc {
  std::string command = "advise";
  int schema_version = kAdviceSchemaVersion;
  std::string snapshot;
  int device = 0;
  std::size_t trace_events = 0;
  std::size_t replay_events = 0;
  std::size_t live_peak_bytes = 0;
  recorded_doc recorded;
  std::optional<std::size_t> device_memory_bytes;
  std::optional<std::size_t> line_limit_bytes;
  std::vector<std::size_t> fit_limits_bytes;
  std::vector<std::string> fit_limits_given;
  std::vector<policy_doc> policies;
  recommended_doc recommended;
  std::vector<std::optional<std::string>> fit_choice;
  std::optional<std::vector<bool>> fit_choice_everywhere;  // absent from older advice
  std::optional<std::size_t> failed_request_bytes;         // absent from older advice
  detail_doc defaults;
  detail_doc recommendation;
  double seconds = 0;
  unsigned threads = 1;
};
void to_json(nlohmann::json& j, const advice_doc& a) {
  j = {{"command", a.command},
       {"schema_version", a.schema_version},
       {"snapshot", a.snapshot},
       {"device", a.device},
       {"trace_events", a.trace_events},
       {"replay_events", a.replay_events},
       {"live_peak_bytes", a.live_peak_bytes},
       {"failed_request_bytes",
        a.failed_request_bytes ? nlohmann::json(*a.failed_request_bytes) : nlohmann::json()},
       {"recorded", a.recorded},
       {"device_memory_bytes", a.device_memory_bytes},
       {"line_limit_bytes", a.line_limit_bytes},
       {"fit_limits_bytes", a.fit_limits_bytes},
       {"fit_limits_given", a.fit_limits_given},
       {"policies", a.policies},
       {"recommended", a.recommended},
       {"fit_choice", a.fit_choice},
       {"fit_choice_everywhere", a.fit_choice_everywhere.value_or(std::vector<bool>{})},
       {"defaults", a.defaults},
       {"recommendation", a.recommendation},
       {"seconds", a.seconds},
       {"threads", a.threads}};
}
void from_json(const nlohmann::json& j, advice_doc& a) {
  require_json_object(j);
  a = {};
  read_required_member(j, "schema_version", a.schema_version);
  if (a.schema_version != kAdviceSchemaVersion)
    throw format_error(fmt::format(
        "an advice file of schema version {}, where this gpu-basics reads {}{}", a.schema_version,
        kAdviceSchemaVersion,
        a.schema_version < kAdviceSchemaVersion
            ? " (older advice replayed garbage_collection_threshold under a limit PyTorch never "
              "sets: run advise again)"
            : ""));
  read_required_member(j, "snapshot", a.snapshot);
  read_required_member(j, "device", a.device);
  read_required_member(j, "trace_events", a.trace_events);
  read_required_member(j, "replay_events", a.replay_events);
  read_required_member(j, "live_peak_bytes", a.live_peak_bytes);
  if (const auto it = j.find("failed_request_bytes"); it != j.end() && !it->is_null())
    read_member(j, "failed_request_bytes", a.failed_request_bytes);
  read_required_member(j, "recorded", a.recorded);
  read_required_member(j, "device_memory_bytes", a.device_memory_bytes);
  read_required_member(j, "line_limit_bytes", a.line_limit_bytes);
  read_required_member(j, "fit_limits_bytes", a.fit_limits_bytes);
  read_member(j, "fit_limits_given", a.fit_limits_given);
  read_required_member(j, "policies", a.policies);
  read_required_member(j, "fit_choice", a.fit_choice);
  read_member(j, "fit_choice_everywhere", a.fit_choice_everywhere);
  read_required_member(j, "defaults", a.defaults);
  read_required_member(j, "recommendation", a.recommendation);
  read_required_member(j, "seconds", a.seconds);
  read_required_member(j, "threads", a.threads);
}

// ---- advice -> documents.

fit_doc fit_of(const fit_outcome& f) {
  fit_doc d{f.limit, f.fits(), f.peak_reserved, f.headroom(), std::nullopt};
  if (f.oom) {
    const oom_point& o = *f.oom;
    d.oom = oom_doc{o.event,    o.request_bytes, o.stream, o.allocated,
                    o.reserved, o.largest_free,  o.frames};
  }
  return d;
}

stranded_doc stranded_doc_of(const stranded_split& s) {
  stranded_doc x{s.event,    s.request_bytes, s.rounded_bytes, s.stream,       s.small_pool,
                 s.reserved, s.allocated,     s.requested,     s.free_bytes(), s.rounding_bytes(),
                 {}};
  for (const auto& p : s.parts)
    x.parts.push_back({std::string(to_string(p.cause)), p.bytes,
                       p.cause == stranded_cause::other_stream
                           ? std::optional<stream_handle>(p.stream)
                           : std::nullopt});
  return x;
}

detail_doc detail_of(const advice& a, const policy_detail& d) {
  detail_doc x;
  x.conf = a.policies[d.index].conf;
  x.smallest_limit_bytes = d.smallest_limit;
  const auto names = advise_placements();
  x.smallest_limit_by_placement.emplace();
  for (std::size_t k = 0; k < d.smallest_by_placement.size() && k < names.size(); ++k)
    x.smallest_limit_by_placement->push_back({names[k].name(), d.smallest_by_placement[k]});
  x.fits_in_placements = d.fits_in;
  for (std::size_t k = 0; k < d.peak_by_placement.size() && k < names.size(); ++k)
    x.peak_reserved_by_placement.push_back({names[k].name(), d.peak_by_placement[k]});
  x.below_smallest = fit_of(d.below);
  x.stranded = stranded_doc_of(d.stranded);
  x.stranded_at_peak_allocated = stranded_doc_of(d.stranded_at_allocated);
  x.peak_reserved_frames = d.stranded.frames;
  x.peak_allocated_frames = d.stranded_at_allocated.frames;
  for (const auto& g : d.growth)
    x.growth.push_back({g.event, g.request_bytes, g.grew_bytes, g.excess_bytes, g.free_before,
                        std::string(to_string(g.cause)), g.stream});
  x.growth_beyond_need_bytes = d.growth_total;
  x.curve = {d.curve.event, d.curve.reserved, d.curve.allocated};
  return x;
}

advice_doc doc_of(const advice& a) {
  advice_doc x;
  x.snapshot = a.file;
  x.device = a.device;
  x.trace_events = a.trace_events;
  x.replay_events = a.replay_events;
  x.live_peak_bytes = a.live_peak;
  x.recorded = {a.recorded_conf, a.recorded.peak_reserved, a.recorded.ooms};
  x.device_memory_bytes = a.device_memory;
  x.line_limit_bytes = a.line_limit;
  x.fit_limits_bytes = a.fit_limits;
  x.fit_limits_given = a.fit_labels;
  for (const auto& p : a.policies) {
    policy_doc d;
    d.conf = p.conf;
    d.keys = p.knobs;
    if (p.result) {
      d.peak_reserved_bytes = p.result->peak_reserved;
      d.peak_allocated_bytes = p.result->peak_allocated;
      d.backend_allocations = p.result->backend_allocations;
      d.fragmentation_at_peak = p.result->fragmentation_at_peak;
    } else {
      d.failure = p.failure;
    }
    for (const auto& f : p.fits) d.fits.push_back(fit_of(f));
    x.policies.push_back(std::move(d));
  }
  const std::string& rec = a.policies[a.recommended].conf;
  const recommendation_lines lines = lines_of(a);
  x.recommended = {rec, lines.conf, lines.torch, lines.gbt};
  for (const auto& c : a.fit_choice)
    x.fit_choice.push_back(c ? std::optional<std::string>(a.policies[*c].conf) : std::nullopt);
  x.fit_choice_everywhere = a.fit_choice_everywhere;
  x.failed_request_bytes = a.failed_request;
  x.defaults = detail_of(a, a.defaults);
  x.recommendation = detail_of(a, a.recommendation);
  x.seconds = a.seconds;
  x.threads = a.threads;
  return x;
}

// ---- documents -> advice, with the checks that the parts agree.

fit_outcome fit_from(const fit_doc& d) {
  if (d.fits == d.oom.has_value())
    throw format_error("a fit whose \"fits\" contradicts its \"oom\"");
  fit_outcome f;
  f.limit = d.limit_bytes;
  f.peak_reserved = d.peak_reserved_bytes;
  if (d.oom) {
    const oom_doc& o = *d.oom;
    f.oom = oom_point{o.event,           o.request_bytes,  o.stream,
                      o.allocated_bytes, o.reserved_bytes, o.largest_free_block_bytes,
                      o.frames};
  }
  return f;
}

stranded_cause cause_named(const std::string& name) {
  for (auto c : {stranded_cause::other_stream, stranded_cause::other_pool,
                 stranded_cause::expandable_pages, stranded_cause::segment_rest,
                 stranded_cause::max_split, stranded_cause::too_small, stranded_cause::unexplained})
    if (to_string(c) == name) return c;
  throw format_error("an unknown stranded cause " + quote_for_message(name));
}

stranded_split stranded_from(const stranded_doc& s) {
  stranded_split d;
  d.event = s.event;
  d.request_bytes = s.request_bytes;
  d.rounded_bytes = s.rounded_bytes;
  d.stream = s.stream;
  d.small_pool = s.small_pool;
  d.reserved = s.reserved_bytes;
  d.allocated = s.allocated_bytes;
  d.requested = s.requested_bytes;
  if (d.allocated > d.reserved || d.requested > d.allocated)
    throw format_error("stranded bytes where allocated exceeds reserved or requested allocated");
  for (const auto& p : s.parts)
    d.parts.push_back({cause_named(p.cause), p.bytes, p.stream.value_or(0)});
  return d;
}

policy_detail detail_from(const detail_doc& x, const std::vector<policy_outcome>& ps) {
  policy_detail d;
  const auto it =
      std::find_if(ps.begin(), ps.end(), [&](const auto& p) { return p.conf == x.conf; });
  if (it == ps.end()) throw format_error("a detailed policy that is not among the policies");
  d.index = static_cast<std::size_t>(it - ps.begin());
  d.smallest_limit = x.smallest_limit_bytes;
  if (x.smallest_limit_by_placement) {  // newer advice
    const auto names = advise_placements();
    if (x.smallest_limit_by_placement->size() != names.size())
      throw format_error("smallest_limit_by_placement is not a list of the placements");
    for (std::size_t k = 0; k < names.size(); ++k) {
      const placement_doc& e = (*x.smallest_limit_by_placement)[k];
      if (e.placement != names[k].name())
        throw format_error("smallest_limit_by_placement names an unknown placement");
      d.smallest_by_placement.push_back(e.bytes);
    }
    if (*std::max_element(d.smallest_by_placement.begin(), d.smallest_by_placement.end()) >
        d.smallest_limit)
      throw format_error("a placement's smallest limit above smallest_limit_bytes");
  }
  if (x.fits_in_placements) {  // newer advice
    d.fits_in = *x.fits_in_placements;
    if (!d.fits_in.empty() && d.smallest_by_placement.empty())
      throw format_error("fits_in_placements without smallest_limit_by_placement");
    for (const std::size_t n : d.fits_in)
      if (n > d.smallest_by_placement.size())
        throw format_error("fits_in_placements counts more placements than were replayed");
  }
  d.below = fit_from(x.below_smallest);
  if (!x.peak_reserved_by_placement.empty() &&
      x.peak_reserved_by_placement.size() != advise_placements().size())
    throw format_error("peak_reserved_by_placement is not a list of the placements");
  for (const auto& e : x.peak_reserved_by_placement) d.peak_by_placement.push_back(e.bytes);
  d.stranded = stranded_from(x.stranded);
  d.stranded_at_allocated = stranded_from(x.stranded_at_peak_allocated);
  d.stranded.frames = x.peak_reserved_frames.value_or(std::vector<std::string>{});
  d.stranded_at_allocated.frames = x.peak_allocated_frames.value_or(std::vector<std::string>{});
  for (const auto& g : x.growth) {
    if (g.beyond_need_bytes > g.grew_bytes)
      throw format_error("a growth beyond need larger than the growth");
    d.growth.push_back({g.event, g.request_bytes, g.grew_bytes, g.beyond_need_bytes,
                        g.free_before_bytes, cause_named(g.cause), g.stream});
  }
  d.growth_total = x.growth_beyond_need_bytes;
  d.curve = {x.curve.event, x.curve.reserved_bytes, x.curve.allocated_bytes};
  if (d.curve.reserved.size() != d.curve.event.size() ||
      d.curve.allocated.size() != d.curve.event.size())
    throw format_error("a curve whose series differ in length");
  return d;
}

advice advice_from(const advice_doc& x) {
  advice a;
  a.file = x.snapshot;
  a.device = x.device;
  a.trace_events = x.trace_events;
  a.replay_events = x.replay_events;
  a.live_peak = x.live_peak_bytes;
  a.recorded_conf = x.recorded.alloc_conf;
  a.recorded.peak_reserved = x.recorded.peak_reserved_bytes;
  a.recorded.ooms = x.recorded.ooms;
  a.device_memory = x.device_memory_bytes;
  a.line_limit = x.line_limit_bytes;
  a.fit_limits = x.fit_limits_bytes;
  a.fit_labels = x.fit_limits_given;
  if (!a.fit_labels.empty() && a.fit_labels.size() != a.fit_limits.size())
    throw format_error("fit_limits_given does not match fit_limits_bytes");
  for (const auto& e : x.policies) {
    policy_outcome p;
    p.conf = e.conf;
    p.knobs = e.keys;
    if (!e.failure) {
      replay_result r;
      r.peak_reserved = e.peak_reserved_bytes;
      r.peak_allocated = e.peak_allocated_bytes;
      r.backend_allocations = e.backend_allocations;
      r.fragmentation_at_peak = e.fragmentation_at_peak;
      p.result = r;
    } else {
      p.failure = *e.failure;
    }
    for (const auto& f : e.fits) p.fits.push_back(fit_from(f));
    if (p.fits.size() != a.fit_limits.size())
      throw format_error("a policy whose fits do not match fit_limits_bytes");
    a.policies.push_back(std::move(p));
  }
  if (a.policies.empty() || !a.policies.front().conf.empty())
    throw format_error("policies that do not start with the defaults");
  a.defaults = detail_from(x.defaults, a.policies);
  a.recommendation = detail_from(x.recommendation, a.policies);
  for (const auto* d : {&a.defaults, &a.recommendation}) {
    if (d->fits_in.empty()) continue;
    if (d->fits_in.size() != a.fit_limits.size())
      throw format_error("fits_in_placements does not match fit_limits_bytes");
    for (std::size_t k = 0; k < d->fits_in.size(); ++k) {  // the first placement is `fits`
      const bool ascending = a.policies[d->index].fits[k].fits();
      if (ascending ? d->fits_in[k] == 0 : d->fits_in[k] >= d->smallest_by_placement.size())
        throw format_error("fits_in_placements disagrees with the policy's fits");
    }
  }
  a.recommended = a.recommendation.index;
  for (const auto& c : x.fit_choice) {
    std::optional<std::size_t> choice;
    if (c)
      for (std::size_t i = 0; i < a.policies.size(); ++i)
        if (a.policies[i].conf == *c) choice = i;
    a.fit_choice.push_back(choice);
  }
  if (a.fit_choice.size() != a.fit_limits.size())
    throw format_error("fit_choice does not match fit_limits_bytes");
  a.fit_choice_everywhere.assign(a.fit_limits.size(), true);
  if (x.fit_choice_everywhere) {  // newer advice
    a.fit_choice_everywhere = *x.fit_choice_everywhere;
    if (a.fit_choice_everywhere.size() != a.fit_limits.size())
      throw format_error("fit_choice_everywhere does not match fit_limits_bytes");
  }
  a.failed_request = x.failed_request_bytes;
  a.seconds = x.seconds;
  a.threads = x.threads;
  return a;
}

}  // namespace

nlohmann::json to_json(const advice& a) {
  nlohmann::json j = doc_of(a);
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& t : advice_tables(a)) tables.push_back(presentation::to_json(t));
  j["tables"] = std::move(tables);
  return j;
}

advice advice_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    if (!j.is_object() || j.value("command", std::string()) != "advise")
      throw format_error("not an advice file (its \"command\" is not \"advise\")");
    advice_doc x;
    try {
      check_saved_byte_sizes(j);
      read_json(j, x);
    } catch (const json_path_error& e) {
      throw format_error("not an advice file that can be read: " + message_line(e.what(), 160));
    }
    return advice_from(x);
  } catch (const format_error& e) {
    throw format_error(source + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw format_error(source + ": not an advice file that can be read: " +
                       message_line(json_path_error_of(e).what(), 160));
  }
}

}  // namespace gpu_basics

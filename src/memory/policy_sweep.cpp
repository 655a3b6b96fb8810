#include "gpu_basics/memory/policy_sweep.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

namespace gpu_basics {

namespace {

/// A conf as the table shows it: escaped (a --policy or a snapshot's conf may hold anything).
std::string label(const std::string& conf) {
  return conf.empty() ? "(defaults)" : printable(conf);
}

double ratio(std::uint64_t a, std::uint64_t b) {
  return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}
}  // namespace

double replay_report::events_per_second() const noexcept {
  std::size_t n = 0;
  for (const auto& p : policies)
    if (p.result) n += p.result->events;
  return seconds > 0 ? static_cast<double>(n) / seconds : 0;
}

std::optional<std::string> replay_report::best() const {
  const policy_replay* b = nullptr;
  for (const auto& p : policies)
    if (p.result && (!b || p.result->peak_reserved < b->result->peak_reserved)) b = &p;
  if (!b) return std::nullopt;
  return b->conf;
}

allocator_options parse_user_policy(const std::string& conf) {
  if (conf.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
    throw logic_error(fmt::format(
        "a blank policy {}; give a PYTORCH_CUDA_ALLOC_CONF string, e.g. expandable_segments:True",
        quote_for_message(conf)));
  return parse_allocator_conf(conf);
}

std::vector<std::string> replay_policies(const std::vector<std::string>& user) {
  std::vector<std::string> v = {"",
                                "max_split_size_mb:64",
                                "max_split_size_mb:128",
                                "max_split_size_mb:256",
                                "max_split_size_mb:512",
                                "roundup_power2_divisions:4",
                                "roundup_power2_divisions:[256:1,512:2,>:4]",
                                "expandable_segments:True",
                                "garbage_collection_threshold:0.6"};
  std::vector<allocator_options> parsed;
  parsed.reserve(v.size() + user.size());
  for (const auto& c : v) parsed.push_back(parse_allocator_conf(c));
  for (const auto& c : user) {
    const allocator_options o = parse_user_policy(c);
    for (std::size_t i = 0; i < parsed.size(); ++i)
      if (parsed[i] == o)
        throw logic_error(
            fmt::format("{} is the same policy as {}, already in the sweep", quote_for_message(c),
                        v[i].empty() ? std::string("the defaults") : quote_for_message(v[i])));
    v.push_back(c);
    parsed.push_back(o);
  }
  return v;
}

replay_report replay_snapshot(const torch_snapshot& s, const std::string& file, int device,
                              const std::vector<std::string>& confs) {
  std::vector<allocator_options> opts;
  opts.reserve(confs.size());
  for (const auto& c : confs) opts.push_back(parse_allocator_conf(c));  // all checked first
  replay_report r;
  r.file = file;
  r.device = device;
  const auto trace = to_replay_trace(s, device, &r.rebuilt);
  try {
    r.recorded = recorded(s, device, trace);
  } catch (const format_error& e) {  // sizes beyond 64 bits: name the file
    throw format_error(fmt::format("{}: {}", file, e.what()));
  }
  r.recorded_conf = s.alloc_conf;
  r.trace_events = r.recorded.events;
  r.replay_events = trace.size();
  // garbage_collection_threshold acts only under a reserved limit, and a snapshot does not hold
  // the device's memory size: the limit is the larger of what PyTorch reserved at its peak and
  // what the default policy reserves in the replay (so the collector has the room the policy
  // without it needed, and shows what it saves within that). Policies without it run first.
  r.policies.resize(confs.size());
  const auto run = [&](std::size_t i, const allocator_options& o) {
    throw_if_interrupted();
    policy_replay& p = r.policies[i];
    p.conf = confs[i];
    try {
      p.result = replay_trace(trace, o);
      r.seconds += p.result->seconds;
    } catch (const out_of_memory& e) {
      p.failure = e.what();
    }
  };
  std::uint64_t default_peak = 0;
  for (std::size_t i = 0; i < confs.size(); ++i) {
    if (opts[i].garbage_collection_threshold > 0) continue;
    run(i, opts[i]);
    if (opts[i] == allocator_options{} && r.policies[i].result)
      default_peak = r.policies[i].result->peak_reserved;
  }
  r.gc_reserved_limit = std::max<std::uint64_t>(r.recorded.peak_reserved, default_peak);
  for (std::size_t i = 0; i < confs.size(); ++i) {
    if (opts[i].garbage_collection_threshold <= 0) continue;
    allocator_options o = opts[i];
    if (o.reserved_limit == SIZE_MAX && r.gc_reserved_limit > 0)
      o.reserved_limit = r.gc_reserved_limit;
    run(i, o);
  }
  return r;
}

presentation::table replay_table(const replay_report& r) {
  presentation::table t;
  t.id = "replay";
  t.title = fmt::format("Replay of {} (device {}, {} trace events, {} allocs and frees replayed)",
                        r.file, r.device, r.trace_events, r.replay_events);
  t.columns = {{"policy", "policy (PYTORCH_CUDA_ALLOC_CONF)"},
               {"peak_reserved_bytes", "peak reserved MiB", kPerMiB, 1},
               {"peak_allocated_bytes", "peak allocated MiB", kPerMiB, 1},
               {"reserved_per_allocated", "reserved / allocated", 1.0, 3},
               {"reserved_per_requested", "reserved / requested", 1.0, 3},
               {"backend_allocations", "backend allocations"},
               {"fragmentation_at_peak", "fragmentation at peak", 1.0, 3}};
  using presentation::value;
  for (const auto& p : r.policies) {
    if (!p.result) {
      t.add_row({label(p.conf), std::string("out of memory"), value{}, value{}, value{}, value{},
                 value{}});
      t.notes.push_back(fmt::format("{}: {}.", label(p.conf), p.failure));
      continue;
    }
    const auto& x = *p.result;
    t.add_row({label(p.conf), static_cast<std::int64_t>(x.peak_reserved),
               static_cast<std::int64_t>(x.peak_allocated),
               ratio(x.peak_reserved, x.peak_allocated), x.reserved_ratio(), x.backend_allocations,
               x.fragmentation_at_peak});
  }
  const auto& rec = r.recorded;
  t.add_row(
      {std::string("PyTorch (recorded)") +
           (r.recorded_conf && !r.recorded_conf->empty() ? " " + label(*r.recorded_conf) : ""),
       static_cast<std::int64_t>(rec.peak_reserved), value{}, value{},
       ratio(rec.peak_reserved, rec.peak_requested), rec.backend_allocations, value{}});
  t.notes.push_back(fmt::format(
      "Peak requested (live bytes as asked, the same for every policy): {:.1f} MiB. {} blocks "
      "alive when recording began were allocated first.",
      static_cast<double>(rec.peak_requested) * kPerMiB, r.rebuilt));
  t.notes.push_back(fmt::format(
      "PyTorch (recorded): reserved from the trace's segment events, starting at {:.1f} MiB (the "
      "final {:.1f} MiB less the trace's net segment change); its allocated sizes are not in the "
      "trace (n/a).",
      static_cast<double>(rec.reserved_at_start) * kPerMiB,
      static_cast<double>(rec.reserved_at_end) * kPerMiB));
  t.notes.push_back(fmt::format(
      "garbage_collection_threshold runs under a reserved limit of {:.1f} MiB, the larger of "
      "PyTorch's recorded peak reserved and the defaults' replayed one (a snapshot does not hold "
      "the device's memory size).",
      static_cast<double>(r.gc_reserved_limit) * kPerMiB));
  if (const auto b = r.best())
    t.notes.push_back(fmt::format("Lowest peak reserved: {}.", label(*b)));
  t.notes.push_back(fmt::format("Replayed {} events in {:.3f} s: {:.2f} M events/s.",
                                r.replay_events * r.policies.size(), r.seconds,
                                r.events_per_second() * 1e-6));
  return t;
}

nlohmann::json to_json(const replay_report& r) {
  nlohmann::json j;
  j["command"] = "replay";
  j["snapshot"] = r.file;
  j["device"] = r.device;
  j["trace_events"] = r.trace_events;
  j["replay_events"] = r.replay_events;
  j["rebuilt_blocks"] = r.rebuilt;
  j["gc_reserved_limit_bytes"] = r.gc_reserved_limit;
  j["recorded"] = {{"alloc_conf", r.recorded_conf ? nlohmann::json(*r.recorded_conf) : nullptr},
                   {"peak_reserved_bytes", r.recorded.peak_reserved},
                   {"peak_requested_bytes", r.recorded.peak_requested},
                   {"reserved_at_start_bytes", r.recorded.reserved_at_start},
                   {"reserved_at_end_bytes", r.recorded.reserved_at_end},
                   {"backend_allocations", r.recorded.backend_allocations},
                   {"ooms", r.recorded.ooms}};
  auto& ps = j["policies"] = nlohmann::json::array();
  for (const auto& p : r.policies) {
    nlohmann::json e = {{"conf", p.conf}};
    if (p.result) {
      const auto& x = *p.result;
      e["peak_reserved_bytes"] = x.peak_reserved;
      e["peak_allocated_bytes"] = x.peak_allocated;
      e["peak_requested_bytes"] = x.peak_requested;
      e["backend_allocations"] = x.backend_allocations;
      e["fragmentation_at_peak"] = x.fragmentation_at_peak;
      e["seconds"] = x.seconds;
      e["failure"] = nullptr;
    } else {
      e["failure"] = p.failure;
    }
    ps.push_back(std::move(e));
  }
  const auto b = r.best();
  j["best_conf"] = b ? nlohmann::json(*b) : nullptr;
  j["seconds"] = r.seconds;
  j["events_per_s"] = r.events_per_second();
  j["table"] = presentation::to_json(replay_table(r));
  return j;
}

}  // namespace gpu_basics

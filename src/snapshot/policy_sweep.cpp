#include "gpu_basics/snapshot/policy_sweep.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/snapshot/replay_json.hpp"

namespace gpu_basics {

namespace {

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
  return parse_allocator_options(conf);
}

std::string policy_label(const std::string& conf) {
  return conf.empty() ? "(defaults)" : printable(conf);
}

namespace {

/// `p` with its per_process_memory_fraction as a reserved limit on a device of `device_memory`
/// bytes (replays run on a simulated device of no particular size).
replay_policy with_device(replay_policy p, std::optional<std::size_t> device_memory) {
  const double f = p.options.per_process_memory_fraction;
  if (f <= 0) return p;
  if (!device_memory)
    throw logic_error(fmt::format(
        "{} sets per_process_memory_fraction, a fraction of the device's memory, which a snapshot "
        "does not record; give it with --device-memory (e.g. 80GiB) or --device RESULT.json (a "
        "saved `gpu-basics info`)",
        quote_for_message(p.conf)));
  p.options.reserved_limit = std::min(p.options.reserved_limit, fraction_limit(f, *device_memory));
  return p;
}

}  // namespace

std::vector<replay_policy> policy_list(const std::vector<std::string>& builtin,
                                       const std::vector<std::string>& user,
                                       repeated_policy repeated,
                                       std::optional<std::size_t> device_memory) {
  std::vector<replay_policy> v;
  v.reserve(builtin.size() + user.size());
  for (const auto& c : builtin) v.push_back(with_device({c, parse_allocator_options(c)}, {}));
  for (const auto& c : user) {
    replay_policy p = with_device({c, parse_user_policy(c)}, device_memory);
    const auto same = std::find_if(v.begin(), v.end(),
                                   [&](const replay_policy& q) { return q.options == p.options; });
    if (same != v.end()) {
      if (repeated == repeated_policy::skip) continue;
      throw logic_error(fmt::format(
          "{} is the same policy as {}, already in the sweep", quote_for_message(c),
          same->conf.empty() ? std::string("the defaults") : quote_for_message(same->conf)));
    }
    v.push_back(std::move(p));
  }
  return v;
}

std::vector<replay_policy> replay_policies(const std::vector<std::string>& user,
                                           std::optional<std::size_t> device_memory) {
  return policy_list({"", "max_split_size_mb:64", "max_split_size_mb:128", "max_split_size_mb:256",
                      "max_split_size_mb:512", "roundup_power2_divisions:4",
                      "roundup_power2_divisions:[256:1,512:2,>:4]", "expandable_segments:True"},
                     user, repeated_policy::refuse, device_memory);
}

policy_sweep sweep_policies(const prepared_trace& trace, const std::vector<replay_policy>& policies,
                            thread_pool& pool,
                            const std::function<void(std::size_t, const policy_run&)>& then) {
  policy_sweep sw;
  sw.runs.resize(policies.size());
  pool.parallel_for(policies.size(), [&](std::size_t i) {
    throw_if_interrupted();
    try {
      sw.runs[i].result = replay_trace(trace, policies[i].options);
    } catch (const out_of_memory& e) {
      sw.runs[i].failure = e.what();
    }
    if (then) then(i, sw.runs[i]);
  });
  return sw;
}

snapshot_trace::snapshot_trace(const torch_snapshot& s, const std::string& file, int device) {
  events = to_replay_trace(s, device, &rebuilt);  // in the body: after rebuilt's initialiser
  try {                                           // sizes beyond 64 bits: name the file
    std::optional<format_error> live_bytes;  // reported after the segments' sizes, as recorded()
    try {
      prepared = prepare_trace(events);
    } catch (const format_error& e) {
      live_bytes = e;
    }
    recorded = gpu_basics::recorded(s, device, prepared);
    if (live_bytes) throw *live_bytes;
  } catch (const format_error& e) {
    throw format_error(fmt::format("{}: {}", file, e.what()));
  }
  if (events.empty()) {  // advice on nothing would read as advice ("peak 0.0 MiB")
    const std::size_t n = device >= 0 && static_cast<std::size_t>(device) < s.device_traces.size()
                              ? s.device_traces[static_cast<std::size_t>(device)].size()
                              : 0;
    throw format_error(fmt::format(
        "{}: device {}'s trace holds no allocation or free to replay ({} other entries): record "
        "the memory history (torch.cuda.memory._record_memory_history) before the job allocates",
        file, device, n));
  }
}

replay_report replay_snapshot(const torch_snapshot& s, const std::string& file, int device,
                              const std::vector<replay_policy>& policies, unsigned threads) {
  const snapshot_trace t(s, file, device);
  replay_report r;
  r.file = file;
  r.device = device;
  r.rebuilt = t.rebuilt;
  r.recorded = t.recorded;
  r.recorded_conf = s.alloc_conf;
  r.trace_events = r.recorded.events;
  r.replay_events = t.events.size();
  const std::size_t work = t.events.size() * policies.size();
  if (threads == 0) threads = work < (std::size_t{1} << 20) ? 1 : default_thread_count();
  thread_pool pool(static_cast<unsigned>(
      std::max<std::size_t>(1, std::min<std::size_t>(threads, policies.size()))));
  policy_sweep sw = sweep_policies(t.prepared, policies, pool);
  r.policies.resize(policies.size());
  for (std::size_t i = 0; i < policies.size(); ++i) {
    r.policies[i] = {policies[i].conf, std::move(sw.runs[i].result), std::move(sw.runs[i].failure)};
    if (r.policies[i].result) r.seconds += r.policies[i].result->seconds;
  }
  return r;
}

bool collects_without_fraction(const std::string& conf) noexcept {
  try {  // a saved file's conf may be anything: it only loses the note
    const auto o = parse_allocator_options(conf);
    return o.garbage_collection_threshold > 0 && o.per_process_memory_fraction <= 0;
  } catch (...) {
    return false;
  }
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
      t.add_row({policy_label(p.conf), std::string("out of memory"), value{}, value{}, value{},
                 value{}, value{}});
      t.notes.push_back(fmt::format("{}: {}.", policy_label(p.conf), p.failure));
      continue;
    }
    const auto& x = *p.result;
    t.add_row({policy_label(p.conf), static_cast<std::int64_t>(x.peak_reserved),
               static_cast<std::int64_t>(x.peak_allocated),
               ratio(x.peak_reserved, x.peak_allocated), x.reserved_ratio(), x.backend_allocations,
               x.fragmentation_at_peak});
  }
  const auto& rec = r.recorded;
  t.add_row({std::string("PyTorch (recorded)") + (r.recorded_conf && !r.recorded_conf->empty()
                                                      ? " " + policy_label(*r.recorded_conf)
                                                      : ""),
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
  for (const auto& p : r.policies)
    if (collects_without_fraction(p.conf))
      t.notes.push_back(fmt::format(
          "{}: garbage_collection_threshold acts only under a memory fraction, as in PyTorch "
          "(per_process_memory_fraction:F in the conf, or torch.cuda.set_per_process_memory_"
          "fraction): without one it replays as the same policy without the threshold.",
          policy_label(p.conf)));
  if (const auto b = r.best())
    t.notes.push_back(fmt::format("Lowest peak reserved: {}.", policy_label(*b)));
  t.notes.push_back(fmt::format("Replayed {} events in {:.3f} s: {:.2f} M events/s.",
                                r.replay_events * r.policies.size(), r.seconds,
                                r.events_per_second() * 1e-6));
  return t;
}

nlohmann::json to_json(const replay_report& r) {
  nlohmann::json j;
  j["command"] = "replay";
  j["schema_version"] = kReplaySchemaVersion;
  j["snapshot"] = r.file;
  j["device"] = r.device;
  j["trace_events"] = r.trace_events;
  j["replay_events"] = r.replay_events;
  j["rebuilt_blocks"] = r.rebuilt;
  j["device_memory_bytes"] = r.device_memory ? nlohmann::json(*r.device_memory) : nullptr;
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

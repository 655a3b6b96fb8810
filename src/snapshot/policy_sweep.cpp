#include "gpu_basics/snapshot/policy_sweep.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/thread_pool.hpp"
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
  return parse_allocator_options(conf);
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
  for (const auto& c : v) parsed.push_back(parse_allocator_options(c));
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
  return replay_snapshot(s, file, device, confs, 0);
}

replay_report replay_snapshot(const torch_snapshot& s, const std::string& file, int device,
                              const std::vector<std::string>& confs, unsigned threads) {
  std::vector<allocator_options> opts;
  opts.reserve(confs.size());
  for (const auto& c : confs) opts.push_back(parse_allocator_options(c));  // all checked first
  replay_report r;
  r.file = file;
  r.device = device;
  const auto trace = to_replay_trace(s, device, &r.rebuilt);
  prepared_trace prepared;
  try {                                      // sizes beyond 64 bits: name the file
    std::optional<format_error> live_bytes;  // reported after the segments' sizes, as recorded()
    try {
      prepared = prepare_trace(trace);
    } catch (const format_error& e) {
      live_bytes = e;
    }
    r.recorded = recorded(s, device, prepared);
    if (live_bytes) throw *live_bytes;
  } catch (const format_error& e) {
    throw format_error(fmt::format("{}: {}", file, e.what()));
  }
  r.recorded_conf = s.alloc_conf;
  r.trace_events = r.recorded.events;
  r.replay_events = trace.size();
  // garbage_collection_threshold acts only under a reserved limit, and a snapshot does not hold
  // the device's memory size: the limit is the larger of what PyTorch reserved at its peak and
  // what the default policy reserves in the replay (so the collector has the room the policy
  // without it needed, and shows what it saves within that). The policies run on a pool of
  // threads, each on its own allocator, in this order: the defaults, the others without a
  // collector, then those with one, which wait for the defaults' peak.
  std::vector<std::size_t> order;
  const auto add = [&](auto pick) {
    for (std::size_t i = 0; i < confs.size(); ++i)
      if (pick(opts[i])) order.push_back(i);
  };
  const auto collects = [](const allocator_options& o) {
    return o.garbage_collection_threshold > 0;
  };
  add([](const allocator_options& o) { return o == allocator_options{}; });
  add([&](const allocator_options& o) { return !collects(o) && o != allocator_options{}; });
  add(collects);
  const std::size_t defaults =
      static_cast<std::size_t>(std::count(opts.begin(), opts.end(), allocator_options{}));
  r.policies.resize(confs.size());
  std::mutex m;
  std::condition_variable defaults_done;
  std::size_t defaults_left = defaults;
  bool failed = false;
  const auto limit = [&] {  // the defaults' peak (the last of them, as they ran in order)
    std::uint64_t default_peak = 0;
    for (std::size_t k = 0; k < defaults; ++k)
      if (const auto& p = r.policies[order[k]]; p.result) default_peak = p.result->peak_reserved;
    r.gc_reserved_limit = std::max<std::uint64_t>(r.recorded.peak_reserved, default_peak);
  };
  if (defaults == 0) limit();
  const auto replay = [&](std::size_t k) {
    const std::size_t i = order[k];
    policy_replay& p = r.policies[i];
    p.conf = confs[i];
    allocator_options o = opts[i];
    if (collects(o)) {
      std::unique_lock lock(m);
      defaults_done.wait(lock, [&] { return defaults_left == 0; });
      if (failed) return;
      if (o.reserved_limit == SIZE_MAX && r.gc_reserved_limit > 0)
        o.reserved_limit = r.gc_reserved_limit;
    }
    bool ok = false;
    const auto finish = [&] {  // a default policy done (or failed): the collectors may start
      if (k >= defaults) return;
      std::lock_guard lock(m);
      failed = failed || !ok;
      if (--defaults_left == 0) limit();
      defaults_done.notify_all();
    };
    try {
      throw_if_interrupted();
      try {
        p.result = replay_trace(prepared, o);
      } catch (const out_of_memory& e) {
        p.failure = e.what();
      }
      ok = true;
    } catch (...) {
      finish();
      throw;
    }
    finish();
  };
  const std::size_t work = trace.size() * confs.size();
  if (threads == 0) threads = work < (std::size_t{1} << 20) ? 1 : default_thread_count();
  thread_pool pool(static_cast<unsigned>(std::min<std::size_t>(threads, confs.size())));
  pool.parallel_for(order.size(), replay);
  for (const auto& p : r.policies)
    if (p.result) r.seconds += p.result->seconds;
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

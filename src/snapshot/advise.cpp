// Advice from a snapshot's trace: replays under limits, the bisected smallest limit, the policy
// search (on a thread pool: each replay has its own allocator and fake backend) and the stranded
// split at peak.
#include "gpu_basics/snapshot/advise.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics {

namespace {

constexpr std::size_t kLargeBuffer = std::size_t{20} << 20;  // PyTorch's kLargeBuffer

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

/// One replay in progress: the allocator on its own fake backend (made-up addresses), the live
/// blocks by id, and the allocated / requested bytes as the trace goes.
class replayer {
 public:
  explicit replayer(const allocator_options& o, address_placement placement = {})
      : backend_(placed_backend(placement)), alloc_(backend_, adjusted(o)) {
    live_.reserve(1024);
  }
  replayer(const replayer&) = delete;
  replayer& operator=(const replayer&) = delete;
  ~replayer() {
    for (auto& [id, b] : live_) alloc_.deallocate(b.ptr);
  }

  /// Applies the `i`th event (Ctrl-C checked every 64Ki events); an alloc's block, else nullptr.
  /// @throws out_of_memory as the allocator does.
  void* apply(std::size_t i, const replay_event& e) {
    if ((i & 0xffff) == 0) throw_if_interrupted();
    if (e.kind == replay_event::op::alloc) {
      void* p = alloc_.allocate(e.bytes, e.stream);
      const std::size_t size = alloc_.block_size(p);
      const auto [it, fresh] = live_.try_emplace(e.id, live_block{p, size, e.bytes});
      if (!fresh) it->second = {p, size, e.bytes};  // the first block leaks, as recorded
      allocated_ += size;
      requested_ += e.bytes;
      return p;
    }
    const auto it = live_.find(e.id);
    if (it == live_.end()) return nullptr;
    alloc_.deallocate(it->second.ptr);
    allocated_ -= it->second.size;
    requested_ -= it->second.requested;
    live_.erase(it);
    return nullptr;
  }

  [[nodiscard]] std::size_t reserved() const { return backend_->used(); }
  [[nodiscard]] std::size_t allocated() const noexcept { return allocated_; }
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  [[nodiscard]] caching_allocator& allocator() noexcept { return alloc_; }
  [[nodiscard]] const allocator_options& options() const { return opts_; }

 private:
  struct live_block {
    void* ptr;
    std::size_t size;
    std::size_t requested;
  };
  static std::shared_ptr<fake_backend> placed_backend(address_placement placement) {
    auto b = std::make_shared<fake_backend>(std::size_t{1} << 46, true);
    b->set_address_placement(placement);
    return b;
  }
  allocator_options adjusted(allocator_options o) {
    o.history_capacity = 0;
    // No GPU timing in a trace: a page release happens as if the GPU had caught up.
    if (o.release_pages == page_release::deferred) o.release_pages = page_release::eager;
    opts_ = o;
    return o;
  }
  allocator_options opts_;
  std::shared_ptr<fake_backend> backend_;
  caching_allocator alloc_;
  std::unordered_map<std::uint64_t, live_block> live_;
  std::size_t allocated_ = 0, requested_ = 0;
};

/// Keys set in a conf (the defaults: 0).
int knobs_of(const allocator_options& o) {
  const allocator_options d;
  int n = 0;
  n += o.max_split_size != d.max_split_size;
  n += o.roundup_power2_divisions != d.roundup_power2_divisions;
  n += o.garbage_collection_threshold != d.garbage_collection_threshold;
  n += o.expandable_segments != d.expandable_segments;
  n += o.release_pages != d.release_pages;
  return n;
}

/// Whether max_split_size_mb keeps a free block of `size` from serving a rounded request (as
/// PyTorch's get_free_block refuses it).
bool split_rule_refuses(std::size_t size, std::size_t rounded, const allocator_options& o) {
  if (o.max_split_size == SIZE_MAX) return false;
  if (rounded < o.max_split_size) return size >= o.max_split_size;
  return size >= rounded + kLargeBuffer;
}

std::string label(const std::string& conf) {
  return conf.empty() ? "(defaults)" : printable(conf);
}

/// The index of the smallest fit limit some policy fits, if any.
std::optional<std::size_t> tightest_fit(const advice& a) {
  std::optional<std::size_t> k;
  for (std::size_t i = 0; i < a.fit_limits.size(); ++i)
    if (a.fit_choice[i] && (!k || a.fit_limits[i] < a.fit_limits[*k])) k = i;
  return k;
}

std::size_t fitting_count(const advice& a, std::size_t k) {
  return static_cast<std::size_t>(std::count_if(a.policies.begin(), a.policies.end(),
                                                [&](const auto& p) { return p.fits[k].fits(); }));
}

double mib(std::size_t b) {
  return static_cast<double>(b) * kPerMiB;
}

}  // namespace

std::string_view to_string(stranded_cause c) noexcept {
  switch (c) {
    case stranded_cause::other_stream:
      return "other stream";
    case stranded_cause::other_pool:
      return "other pool";
    case stranded_cause::expandable_pages:
      return "expandable pages";
    case stranded_cause::segment_rest:
      return "rest of new segment";
    case stranded_cause::max_split:
      return "max_split_size";
    case stranded_cause::too_small:
      return "too small";
    case stranded_cause::unexplained:
      break;
  }
  return "unexplained";
}

std::size_t stranded_split::bytes_of(stranded_cause c) const noexcept {
  std::size_t n = 0;
  for (const auto& p : parts)
    if (p.cause == c) n += p.bytes;
  return n;
}

std::vector<std::string> advise_policies(const std::vector<std::string>& user) {
  std::vector<std::string> v;
  const std::vector<std::string> split = {"",
                                          "max_split_size_mb:64",
                                          "max_split_size_mb:128",
                                          "max_split_size_mb:256",
                                          "max_split_size_mb:512",
                                          "max_split_size_mb:1024"};
  const std::vector<std::string> round = {
      "", "roundup_power2_divisions:2", "roundup_power2_divisions:4", "roundup_power2_divisions:8"};
  const std::vector<std::string> expand = {"", "expandable_segments:True"};
  const std::vector<std::string> gc = {"", "garbage_collection_threshold:0.6",
                                       "garbage_collection_threshold:0.8"};
  for (const auto& g : gc)
    for (const auto& e : expand)
      for (const auto& r : round)
        for (const auto& s : split) {
          std::string c;
          for (const std::string* k : {&s, &r, &e, &g})
            if (!k->empty()) c += (c.empty() ? "" : ",") + *k;
          v.push_back(std::move(c));
        }
  std::vector<allocator_options> parsed;
  parsed.reserve(v.size());
  for (const auto& c : v) parsed.push_back(parse_allocator_options(c));
  for (const auto& c : user) {
    const allocator_options o = parse_user_policy(c);
    if (std::find(parsed.begin(), parsed.end(), o) != parsed.end()) continue;  // searched already
    v.push_back(c);
    parsed.push_back(o);
  }
  return v;
}

std::vector<address_placement> advise_placements() {
  std::vector<address_placement> v = {{address_order::ascending, 0},
                                      {address_order::descending, 0}};
  for (std::uint64_t seed = 1; v.size() < kAdvicePlacements; ++seed)
    v.push_back({address_order::shuffled, seed});
  return v;
}

fit_outcome replay_under_limit(const std::vector<replay_event>& trace, const allocator_options& o,
                               std::size_t limit, address_placement placement) {
  allocator_options lo = o;
  lo.reserved_limit = limit;
  replayer r(lo, placement);
  fit_outcome f;
  f.limit = limit;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    try {
      (void)r.apply(i, trace[i]);
    } catch (const out_of_memory&) {
      const allocator_stats s = r.allocator().stats();
      f.oom = oom_point{i,
                        trace[i].bytes,
                        trace[i].stream,
                        static_cast<std::size_t>(s.allocated_bytes.current),
                        static_cast<std::size_t>(s.reserved_bytes.current),
                        s.largest_free_block,
                        {}};
      return f;
    }
    f.peak_reserved = std::max(f.peak_reserved, r.reserved());
  }
  return f;
}

std::size_t smallest_fitting_limit(const std::vector<replay_event>& trace,
                                   const allocator_options& o, std::size_t fitting,
                                   address_placement placement) {
  const std::size_t live = peak_requested(trace);
  if (live == 0) return 0;
  // lo never fits (below the live peak); hi fits.
  std::size_t lo = round_up(live, kAdvicePage) - kAdvicePage;
  std::size_t hi = std::max(round_up(fitting, kAdvicePage), lo + kAdvicePage);
  while (!replay_under_limit(trace, o, hi, placement).fits()) {  // said to fit, did not: widen
    lo = hi;
    if (hi > (std::size_t{1} << 45)) return hi;  // 32 TiB: give up widening
    hi *= 2;
  }
  while (hi - lo > kAdvicePage) {
    const std::size_t mid = lo + (hi - lo) / kAdvicePage / 2 * kAdvicePage;
    (replay_under_limit(trace, o, mid, placement).fits() ? hi : lo) = mid;
  }
  return hi;
}

stranded_split stranded_at_peak(const std::vector<replay_event>& trace,
                                const allocator_options& o) {
  // First pass: where reserved first reaches its peak; second: replay up to it, then look.
  std::size_t peak = 0, at = 0;
  bool any = false;
  {
    replayer r(o);
    for (std::size_t i = 0; i < trace.size(); ++i) {
      if (!r.apply(i, trace[i])) continue;
      if (const std::size_t now = r.reserved(); now > peak || !any) {
        peak = now;
        at = i;
        any = true;
      }
    }
  }
  stranded_split s;
  if (!any) return s;
  replayer r(o);
  void* p = nullptr;
  for (std::size_t i = 0; i <= at; ++i) p = r.apply(i, trace[i]);
  const replay_event& e = trace[at];
  s.event = at;
  s.request_bytes = e.bytes;
  s.rounded_bytes = round_request(e.bytes, r.options());
  s.stream = e.stream;
  s.small_pool = is_small_request(s.rounded_bytes);
  const auto new_ptr = reinterpret_cast<std::uintptr_t>(p);
  std::map<std::pair<stranded_cause, stream_handle>, std::size_t> parts;
  for (const segment_view& g : r.allocator().segments()) {
    s.reserved += g.total_size;
    s.allocated += g.allocated_size;
    s.requested += g.requested_size;
    const bool holds_new = !g.expandable && new_ptr >= g.ptr && new_ptr - g.ptr < g.total_size;
    for (const block_view& b : g.blocks) {
      if (b.state == "active_allocated") continue;
      stranded_cause c = stranded_cause::unexplained;
      stream_handle st = 0;
      if (b.state != "inactive") {
        c = stranded_cause::unexplained;  // awaiting other streams: none in a replay
      } else if (g.stream != e.stream) {
        c = stranded_cause::other_stream;
        st = g.stream;
      } else if (g.small != s.small_pool) {
        c = stranded_cause::other_pool;
      } else if (g.expandable) {
        c = stranded_cause::expandable_pages;
      } else if (holds_new) {
        c = stranded_cause::segment_rest;
      } else if (split_rule_refuses(b.size, s.rounded_bytes, r.options())) {
        c = stranded_cause::max_split;
      } else if (b.size < s.rounded_bytes) {
        c = stranded_cause::too_small;
      }
      parts[{c, st}] += b.size;
    }
  }
  for (const auto& [k, bytes] : parts)
    if (bytes > 0) s.parts.push_back({k.first, bytes, k.second});
  return s;
}

usage_curve usage_over_trace(const std::vector<replay_event>& trace, const allocator_options& o,
                             std::size_t points) {
  usage_curve c;
  if (trace.empty()) return c;
  const std::size_t stretch = std::max<std::size_t>(1, (trace.size() + points - 1) / points);
  replayer r(o);
  std::size_t res = 0, all = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    (void)r.apply(i, trace[i]);
    res = std::max(res, r.reserved());
    all = std::max(all, r.allocated());
    if ((i + 1) % stretch == 0 || i + 1 == trace.size()) {
      c.event.push_back(i);
      c.reserved.push_back(res);
      c.allocated.push_back(all);
      res = all = 0;
    }
  }
  return c;
}

advice advise_snapshot(const torch_snapshot& s, const std::string& file, int device,
                       const std::vector<std::string>& confs,
                       const std::vector<std::size_t>& fit_limits, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<allocator_options> opts;
  opts.reserve(confs.size());
  for (const auto& c : confs) opts.push_back(parse_allocator_options(c));  // all checked first
  if (confs.empty() || !confs.front().empty())
    throw logic_error("advise_snapshot: the first policy must be the defaults");
  advice a;
  a.file = file;
  a.device = device;
  a.fit_limits = fit_limits;
  std::size_t rebuilt = 0;
  const auto trace = to_replay_trace(s, device, &rebuilt);
  try {
    a.recorded = recorded(s, device, trace);
    a.live_peak = peak_requested(trace);
  } catch (const format_error& e) {  // sizes beyond 64 bits: name the file
    throw format_error(fmt::format("{}: {}", file, e.what()));
  }
  a.recorded_conf = s.alloc_conf;
  a.trace_events = a.recorded.events;
  a.replay_events = trace.size();

  thread_pool pool(threads ? threads : default_thread_count());
  a.threads = pool.size();
  a.policies.resize(confs.size());
  const auto run = [&](std::size_t i) {
    throw_if_interrupted();
    policy_outcome& p = a.policies[i];
    p.conf = confs[i];
    p.knobs = knobs_of(opts[i]);
    allocator_options o = opts[i];
    if (o.garbage_collection_threshold > 0 && o.reserved_limit == SIZE_MAX)
      o.reserved_limit = a.gc_reserved_limit;
    try {
      p.result = replay_trace(trace, o);
    } catch (const out_of_memory& e) {
      p.failure = e.what();
    }
    for (std::size_t limit : fit_limits) {
      // Under a limit at or above its peak a policy never meets the limit: the replay would be
      // the one just made (garbage collection excepted, which the limit itself sets off).
      if (p.result && opts[i].garbage_collection_threshold <= 0 && p.result->peak_reserved <= limit)
        p.fits.push_back(fit_outcome{limit, p.result->peak_reserved, std::nullopt});
      else
        p.fits.push_back(replay_under_limit(trace, opts[i], limit));
    }
  };
  // The defaults first: garbage_collection_threshold's limit without --fit depends on them (as
  // in replay: the larger of PyTorch's recorded peak and the defaults' replayed one).
  a.gc_reserved_limit = a.recorded.peak_reserved;
  run(0);
  if (a.policies[0].result)
    a.gc_reserved_limit =
        std::max<std::uint64_t>(a.gc_reserved_limit, a.policies[0].result->peak_reserved);
  pool.parallel_for(confs.size() - 1, [&](std::size_t k) { run(k + 1); });

  // The recommendation: the lowest peak reserved (in whole pages), then the simplest.
  const auto lowest = [&] {
    std::optional<std::size_t> best;
    const auto key = [&](std::size_t i) {
      const auto& p = a.policies[i];
      return std::tuple(round_up(p.result->peak_reserved, kAdvicePage), p.knobs,
                        p.result->peak_reserved, i);
    };
    for (std::size_t i = 0; i < a.policies.size(); ++i)
      if (a.policies[i].result && (!best || key(i) < key(*best))) best = i;
    return best.value_or(0);
  }();
  a.recommended = lowest;
  // Per limit, the simplest policy that fits it under every placement of segments (the
  // candidates in order, each checked under the other placements until one holds); where none
  // does, the simplest that fits with ascending addresses.
  const std::vector<address_placement> placements = advise_placements();
  for (std::size_t k = 0; k < fit_limits.size(); ++k) {
    std::vector<std::size_t> fitting;
    for (std::size_t i = 0; i < a.policies.size(); ++i)
      if (a.policies[i].fits[k].fits()) fitting.push_back(i);
    const auto key = [&](std::size_t i) {
      return std::tuple(a.policies[i].knobs, a.policies[i].fits[k].peak_reserved, i);
    };
    std::sort(fitting.begin(), fitting.end(),
              [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
    std::optional<std::size_t> choice;
    for (const std::size_t i : fitting) {
      throw_if_interrupted();
      bool everywhere = true;
      for (std::size_t q = 1; q < placements.size() && everywhere; ++q)
        everywhere = replay_under_limit(trace, opts[i], fit_limits[k], placements[q]).fits();
      if (everywhere) {
        choice = i;
        break;
      }
    }
    a.fit_choice_everywhere.push_back(choice || fitting.empty());
    if (!choice && !fitting.empty()) choice = fitting.front();
    a.fit_choice.push_back(choice);
  }
  // With limits: the simplest policy that fits the smallest limit anything fits.
  if (const auto k = tightest_fit(a)) a.recommended = *a.fit_choice[*k];

  // A limit thought to fit, where bisection starts: the peak without a limit (under
  // garbage_collection_threshold, at least the limit it ran under).
  const auto fitting_of = [&](std::size_t i) {
    const auto& p = a.policies[i];
    std::size_t fitting = p.result ? p.result->peak_reserved : a.gc_reserved_limit;
    if (opts[i].garbage_collection_threshold > 0)
      fitting = std::max<std::size_t>(fitting, a.gc_reserved_limit);
    return fitting;
  };
  // The smallest limit of each detailed policy (the defaults, then the recommendation unless it
  // is the defaults) under each placement, all on the pool.
  const std::size_t detailed = a.recommended == 0 ? 1 : 2;
  std::vector<std::vector<std::size_t>> smallest(detailed,
                                                 std::vector<std::size_t>(placements.size(), 0));
  pool.parallel_for(detailed * placements.size(), [&](std::size_t j) {
    throw_if_interrupted();
    const std::size_t which = j / placements.size(), k = j % placements.size();
    const std::size_t i = which == 0 ? 0 : a.recommended;
    smallest[which][k] = smallest_fitting_limit(trace, opts[i], fitting_of(i), placements[k]);
  });
  const auto detail = [&](std::size_t i, std::size_t which) {
    policy_detail d;
    d.index = i;
    allocator_options o = opts[i];
    d.smallest_by_placement = smallest[which];
    // The largest placement's limit, raised while a placement does not fit it (a replay need not
    // fit every limit above its smallest); `below` is replayed under the placement that needed
    // the limit.
    const auto worst =
        std::max_element(d.smallest_by_placement.begin(), d.smallest_by_placement.end());
    std::size_t need = static_cast<std::size_t>(worst - d.smallest_by_placement.begin());
    d.smallest_limit = *worst;
    while (d.smallest_limit < (std::size_t{1} << 45)) {  // 32 TiB: as far as bisection widens
      std::optional<std::size_t> misfit;
      for (std::size_t k = 0; k < placements.size() && !misfit; ++k)
        if (d.smallest_by_placement[k] < d.smallest_limit &&
            !replay_under_limit(trace, o, d.smallest_limit, placements[k]).fits())
          misfit = k;
      if (!misfit) break;
      need = *misfit;
      d.smallest_limit += kAdvicePage;
    }
    if (d.smallest_limit >= kAdvicePage)
      d.below = replay_under_limit(trace, o, d.smallest_limit - kAdvicePage, placements[need]);
    for (std::size_t k = 0; k < fit_limits.size(); ++k) {  // the ascending one is replayed
      std::size_t n = a.policies[i].fits[k].fits() ? 1 : 0;
      for (std::size_t q = 1; q < placements.size(); ++q)
        n += replay_under_limit(trace, o, fit_limits[k], placements[q]).fits() ? 1 : 0;
      d.fits_in.push_back(n);
    }
    if (o.garbage_collection_threshold > 0 && o.reserved_limit == SIZE_MAX)
      o.reserved_limit = a.gc_reserved_limit;
    d.stranded = stranded_at_peak(trace, o);
    d.curve = usage_over_trace(trace, o);
    return d;
  };
  std::vector<policy_detail> details(2);
  pool.parallel_for(detailed,
                    [&](std::size_t k) { details[k] = detail(k == 0 ? 0 : a.recommended, k); });
  a.defaults = std::move(details[0]);
  a.recommendation = a.recommended == 0 ? a.defaults : std::move(details[1]);
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

std::string torch_env_line(const std::string& conf) {
  return conf.empty() ? std::string("(unset PYTORCH_CUDA_ALLOC_CONF: the defaults)")
                      : "PYTORCH_CUDA_ALLOC_CONF=" + printable(conf);
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

std::string oom_note(const std::string& who, const fit_outcome& f) {
  const oom_point& o = *f.oom;
  std::string n = fmt::format(
      "{} under {}: out of memory at event {}, a request of {:.1f} MiB on stream {:#x}; "
      "after freeing the cache: {:.1f} MiB allocated, {:.1f} MiB reserved, largest free block "
      "{:.1f} MiB.",
      who, format_bytes(f.limit), o.event, mib(o.request_bytes), o.stream, mib(o.allocated),
      mib(o.reserved), mib(o.largest_free));
  if (!o.frames.empty()) {
    n += " Allocated at:";
    for (const auto& fr : o.frames) n += " " + printable(fr) + ";";
    n.back() = '.';
  }
  return n;
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
  t.add_row({std::string("defaults"), label(d.conf), peak(d),
             static_cast<std::int64_t>(a.defaults.smallest_limit), placement_range(a.defaults),
             static_cast<std::int64_t>(a.defaults.stranded.free_bytes())});
  t.add_row({std::string("recommended"), label(r.conf), peak(r),
             static_cast<std::int64_t>(a.recommendation.smallest_limit),
             placement_range(a.recommendation),
             static_cast<std::int64_t>(a.recommendation.stranded.free_bytes())});
  t.notes.push_back(
      fmt::format("Live bytes (as requested) peak at {:.1f} MiB: no limit below "
                  "that can fit, whatever the policy.",
                  mib(a.live_peak)));
  if (a.recommended == a.defaults.index) {
    t.notes.push_back(
        a.fit_limits.empty()
            ? "The defaults are the best: no searched policy reserves a page less at peak."
            : "The defaults are the simplest policy that fits the tightest limit given.");
  } else if (const auto k = tightest_fit(a)) {
    const fit_outcome& fd = d.fits[*k];
    t.notes.push_back(fmt::format(
        "Why: under {}, the tightest limit given that a policy fits, the defaults {}; {} fits "
        "(of {} policies that fit it with the replay's ascending addresses, the one with the "
        "fewest keys that fits under every placement, where one does). Its smallest limit is {} "
        "against the defaults' {}. At peak without a limit the defaults leave {}.",
        format_bytes(a.fit_limits[*k]),
        fd.fits() ? std::string("fit")
                  : fmt::format("run out of memory at event {}", fd.oom->event),
        label(r.conf), fitting_count(a, *k), format_bytes(a.recommendation.smallest_limit),
        format_bytes(a.defaults.smallest_limit), stranded_sentence(a.defaults.stranded)));
  } else if (d.result && r.result) {
    const auto saved = static_cast<std::int64_t>(d.result->peak_reserved) -
                       static_cast<std::int64_t>(r.result->peak_reserved);
    t.notes.push_back(fmt::format(
        "Why: the defaults leave {}. {} reserves {:.1f} MiB at peak, {:.1f} MiB {} than the "
        "defaults, leaving {}; its smallest limit is {:.1f} MiB against the defaults' {:.1f} MiB.",
        stranded_sentence(a.defaults.stranded), label(r.conf), mib(r.result->peak_reserved),
        mib(static_cast<std::size_t>(std::abs(saved))), saved >= 0 ? "less" : "more",
        stranded_sentence(a.recommendation.stranded), mib(a.recommendation.smallest_limit),
        mib(a.defaults.smallest_limit)));
  }
  t.notes.push_back("Use with PyTorch: " + torch_env_line(r.conf));
  t.notes.push_back(r.conf.empty() ? "Use with gpu-basics' allocator: gbt.use()"
                                   : "Use with gpu-basics' allocator: gbt.use(conf=\"" +
                                         printable(r.conf) + "\")");
  t.notes.push_back(fmt::format(
      "A limit is PyTorch's torch.cuda.set_per_process_memory_fraction(limit / device memory): "
      "reserved may not pass it; at the limit the cache is freed and the request retried, then "
      "torch.OutOfMemoryError. Smallest limits are bisected to {} MiB pages.",
      kAdvicePage / kMiB));
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
      f.add_row({format_bytes(a.fit_limits[k]), fit_cell(d.fits[k], a.defaults, k),
                 fit_cell(r.fits[k], a.recommendation, k),
                 !c ? fmt::format("none of {} policies", a.policies.size())
                 : k < a.fit_choice_everywhere.size() && !a.fit_choice_everywhere[k]
                     ? label(a.policies[*c].conf) + " (not under every placement)"
                     : label(a.policies[*c].conf)});
      if (a.fit_limits[k] < a.live_peak)
        f.notes.push_back(fmt::format("{} cannot fit: live bytes alone peak at {}.",
                                      format_bytes(a.fit_limits[k]), format_bytes(a.live_peak)));
      else
        for (const auto& [who, p] :
             {std::pair{"The defaults", &d}, std::pair{"The recommendation", &r}})
          if (!p->fits[k].fits() && (p == &d || &r != &d))
            f.notes.push_back(oom_note(who, p->fits[k]));
    }
    out.push_back(std::move(f));
  }

  presentation::table s;
  s.id = "stranded";
  s.title = "Reserved but free at peak reserved, by why the request could not use it";
  s.columns = {{"cause", "cause"},
               {"defaults_bytes", "defaults MiB", kPerMiB, 1},
               {"recommended_bytes", "recommended MiB", kPerMiB, 1}};
  const auto causes = {stranded_cause::other_stream,     stranded_cause::other_pool,
                       stranded_cause::expandable_pages, stranded_cause::segment_rest,
                       stranded_cause::max_split,        stranded_cause::too_small,
                       stranded_cause::unexplained};
  const stranded_split& sd = a.defaults.stranded;
  const stranded_split& sr = a.recommendation.stranded;
  for (stranded_cause c : causes) {
    const std::size_t x = sd.bytes_of(c), y = sr.bytes_of(c);
    if (x == 0 && y == 0) continue;
    s.add_row(
        {std::string(to_string(c)), static_cast<std::int64_t>(x), static_cast<std::int64_t>(y)});
  }
  s.add_row({std::string("total free (reserved - allocated)"),
             static_cast<std::int64_t>(sd.free_bytes()),
             static_cast<std::int64_t>(sr.free_bytes())});
  s.add_row({std::string("rounding inside allocated blocks"),
             static_cast<std::int64_t>(sd.rounding_bytes()),
             static_cast<std::int64_t>(sr.rounding_bytes())});
  for (const auto* x : {&sd, &sr})
    s.notes.push_back(fmt::format(
        "{}: peak reserved {:.1f} MiB first reached at event {}, by a request of {:.1f} MiB "
        "({:.1f} MiB rounded, {} pool) on stream {:#x} that no free block could serve; {}.",
        x == &sd ? "Defaults" : "Recommended", mib(x->reserved), x->event, mib(x->request_bytes),
        mib(x->rounded_bytes), x->small_pool ? "small" : "large", x->stream,
        stranded_sentence(*x)));
  out.push_back(std::move(s));

  presentation::table p;
  p.id = "policies";
  p.title = "The searched policies, by peak reserved (the first 12, the defaults and the user's)";
  p.columns = {{"conf", "policy"},
               {"knobs", "keys"},
               {"peak_reserved_bytes", "peak reserved MiB", kPerMiB, 1},
               {"vs_defaults", "vs defaults %", 100.0, 1},
               {"backend_allocations", "backend allocations"}};
  for (std::size_t k = 0; k < a.fit_limits.size(); ++k)
    p.columns.push_back({fmt::format("fits_{}", k), "under " + format_bytes(a.fit_limits[k])});
  std::vector<std::size_t> order(a.policies.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const auto& px = a.policies[x];
    const auto& py = a.policies[y];
    if (!px.result || !py.result) return px.result.has_value() && !py.result.has_value();
    return std::tuple(px.result->peak_reserved, px.knobs) <
           std::tuple(py.result->peak_reserved, py.knobs);
  });
  const std::size_t searched = advise_policies({}).size();
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    const std::size_t i = order[rank];
    if (rank >= 12 && i != 0 && i < searched) continue;
    const auto& x = a.policies[i];
    std::vector<value> row = {label(x.conf), static_cast<std::int64_t>(x.knobs), peak(x), value{},
                              value{}};
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
      "peak reserved (negative is less). garbage_collection_threshold acts only under a limit: "
      "without --fit it runs under {:.1f} MiB (the larger of PyTorch's recorded peak and the "
      "defaults' replayed one).",
      a.policies.size(), a.replay_events, a.seconds, a.threads, mib(a.gc_reserved_limit)));
  out.push_back(std::move(p));
  return out;
}

nlohmann::json to_json(const advice& a) {
  using nlohmann::json;
  const auto oom_json = [](const fit_outcome& f) -> json {
    if (f.fits()) return nullptr;
    const oom_point& o = *f.oom;
    return {{"event", o.event},
            {"request_bytes", o.request_bytes},
            {"stream", o.stream},
            {"allocated_bytes", o.allocated},
            {"reserved_bytes", o.reserved},
            {"largest_free_block_bytes", o.largest_free},
            {"frames", o.frames}};
  };
  const auto fit_json = [&](const fit_outcome& f) {
    return json{{"limit_bytes", f.limit},
                {"fits", f.fits()},
                {"peak_reserved_bytes", f.peak_reserved},
                {"headroom_bytes", f.headroom()},
                {"oom", oom_json(f)}};
  };
  const auto placements_json = [](const policy_detail& d) {
    json v = json::array();
    const auto names = advise_placements();
    for (std::size_t k = 0; k < d.smallest_by_placement.size() && k < names.size(); ++k)
      v.push_back({{"placement", names[k].name()}, {"bytes", d.smallest_by_placement[k]}});
    return v;
  };
  const auto detail_json = [&](const policy_detail& d) {
    json parts = json::array();
    for (const auto& p : d.stranded.parts) {
      json e = {{"cause", to_string(p.cause)}, {"bytes", p.bytes}};
      if (p.cause == stranded_cause::other_stream) e["stream"] = p.stream;
      parts.push_back(std::move(e));
    }
    const auto& s = d.stranded;
    return json{{"conf", a.policies[d.index].conf},
                {"smallest_limit_bytes", d.smallest_limit},
                {"smallest_limit_by_placement", placements_json(d)},
                {"fits_in_placements", d.fits_in},
                {"below_smallest", fit_json(d.below)},
                {"stranded",
                 {{"event", s.event},
                  {"request_bytes", s.request_bytes},
                  {"rounded_bytes", s.rounded_bytes},
                  {"stream", s.stream},
                  {"small_pool", s.small_pool},
                  {"reserved_bytes", s.reserved},
                  {"allocated_bytes", s.allocated},
                  {"requested_bytes", s.requested},
                  {"free_bytes", s.free_bytes()},
                  {"rounding_bytes", s.rounding_bytes()},
                  {"parts", std::move(parts)}}},
                {"curve",
                 {{"event", d.curve.event},
                  {"reserved_bytes", d.curve.reserved},
                  {"allocated_bytes", d.curve.allocated}}}};
  };
  json j;
  j["command"] = "advise";
  j["schema_version"] = 1;
  j["snapshot"] = a.file;
  j["device"] = a.device;
  j["trace_events"] = a.trace_events;
  j["replay_events"] = a.replay_events;
  j["live_peak_bytes"] = a.live_peak;
  j["recorded"] = {{"alloc_conf", a.recorded_conf ? json(*a.recorded_conf) : json(nullptr)},
                   {"peak_reserved_bytes", a.recorded.peak_reserved},
                   {"ooms", a.recorded.ooms}};
  j["gc_reserved_limit_bytes"] = a.gc_reserved_limit;
  j["fit_limits_bytes"] = a.fit_limits;
  json ps = json::array();
  for (const auto& p : a.policies) {
    json e = {{"conf", p.conf}, {"keys", p.knobs}};
    if (p.result) {
      e["peak_reserved_bytes"] = p.result->peak_reserved;
      e["peak_allocated_bytes"] = p.result->peak_allocated;
      e["backend_allocations"] = p.result->backend_allocations;
      e["fragmentation_at_peak"] = p.result->fragmentation_at_peak;
      e["failure"] = nullptr;
    } else {
      e["failure"] = p.failure;
    }
    json fits = json::array();
    for (const auto& f : p.fits) fits.push_back(fit_json(f));
    e["fits"] = std::move(fits);
    ps.push_back(std::move(e));
  }
  j["policies"] = std::move(ps);
  j["recommended"] = {{"conf", a.policies[a.recommended].conf},
                      {"torch_env", torch_env_line(a.policies[a.recommended].conf)}};
  json choice = json::array();
  for (const auto& c : a.fit_choice)
    choice.push_back(c ? json(a.policies[*c].conf) : json(nullptr));
  j["fit_choice"] = std::move(choice);
  j["fit_choice_everywhere"] = a.fit_choice_everywhere;
  j["defaults"] = detail_json(a.defaults);
  j["recommendation"] = detail_json(a.recommendation);
  j["seconds"] = a.seconds;
  j["threads"] = a.threads;
  json tables = json::array();
  for (const auto& t : advice_tables(a)) tables.push_back(presentation::to_json(t));
  j["tables"] = std::move(tables);
  return j;
}

namespace {

fit_outcome fit_from_json(const nlohmann::json& j) {
  fit_outcome f;
  f.limit = j.at("limit_bytes").get<std::size_t>();
  f.peak_reserved = j.at("peak_reserved_bytes").get<std::size_t>();
  if (const auto& o = j.at("oom"); !o.is_null())
    f.oom = oom_point{o.at("event").get<std::size_t>(),
                      o.at("request_bytes").get<std::size_t>(),
                      o.at("stream").get<stream_handle>(),
                      o.at("allocated_bytes").get<std::size_t>(),
                      o.at("reserved_bytes").get<std::size_t>(),
                      o.at("largest_free_block_bytes").get<std::size_t>(),
                      o.at("frames").get<std::vector<std::string>>()};
  return f;
}

stranded_cause cause_named(const std::string& name) {
  for (auto c : {stranded_cause::other_stream, stranded_cause::other_pool,
                 stranded_cause::expandable_pages, stranded_cause::segment_rest,
                 stranded_cause::max_split, stranded_cause::too_small, stranded_cause::unexplained})
    if (to_string(c) == name) return c;
  throw format_error("an unknown stranded cause " + quote_for_message(name));
}

policy_detail detail_from_json(const nlohmann::json& j, const std::vector<policy_outcome>& ps) {
  policy_detail d;
  const auto conf = j.at("conf").get<std::string>();
  const auto it = std::find_if(ps.begin(), ps.end(), [&](const auto& p) { return p.conf == conf; });
  if (it == ps.end()) throw format_error("a detailed policy that is not among the policies");
  d.index = static_cast<std::size_t>(it - ps.begin());
  d.smallest_limit = j.at("smallest_limit_bytes").get<std::size_t>();
  if (const auto by = j.find("smallest_limit_by_placement"); by != j.end()) {  // newer advice
    const auto names = advise_placements();
    if (!by->is_array() || by->size() != names.size())
      throw format_error("smallest_limit_by_placement is not a list of the placements");
    for (std::size_t k = 0; k < by->size(); ++k) {
      const auto& e = (*by)[k];
      if (e.at("placement").get<std::string>() != names[k].name())
        throw format_error("smallest_limit_by_placement names an unknown placement");
      d.smallest_by_placement.push_back(e.at("bytes").get<std::size_t>());
    }
    if (!d.smallest_by_placement.empty() &&
        *std::max_element(d.smallest_by_placement.begin(), d.smallest_by_placement.end()) >
            d.smallest_limit)
      throw format_error("a placement's smallest limit above smallest_limit_bytes");
  }
  if (const auto in = j.find("fits_in_placements"); in != j.end()) {  // newer advice
    d.fits_in = in->get<std::vector<std::size_t>>();
    if (!d.fits_in.empty() && d.smallest_by_placement.empty())
      throw format_error("fits_in_placements without smallest_limit_by_placement");
    for (const std::size_t n : d.fits_in)
      if (n > d.smallest_by_placement.size())
        throw format_error("fits_in_placements counts more placements than were replayed");
  }
  d.below = fit_from_json(j.at("below_smallest"));
  const auto& s = j.at("stranded");
  d.stranded.event = s.at("event").get<std::size_t>();
  d.stranded.request_bytes = s.at("request_bytes").get<std::size_t>();
  d.stranded.rounded_bytes = s.at("rounded_bytes").get<std::size_t>();
  d.stranded.stream = s.at("stream").get<stream_handle>();
  d.stranded.small_pool = s.at("small_pool").get<bool>();
  d.stranded.reserved = s.at("reserved_bytes").get<std::size_t>();
  d.stranded.allocated = s.at("allocated_bytes").get<std::size_t>();
  d.stranded.requested = s.at("requested_bytes").get<std::size_t>();
  if (d.stranded.allocated > d.stranded.reserved || d.stranded.requested > d.stranded.allocated)
    throw format_error("stranded bytes where allocated exceeds reserved or requested allocated");
  for (const auto& p : s.at("parts"))
    d.stranded.parts.push_back({cause_named(p.at("cause").get<std::string>()),
                                p.at("bytes").get<std::size_t>(),
                                p.value("stream", stream_handle{0})});
  const auto& c = j.at("curve");
  d.curve.event = c.at("event").get<std::vector<std::size_t>>();
  d.curve.reserved = c.at("reserved_bytes").get<std::vector<std::size_t>>();
  d.curve.allocated = c.at("allocated_bytes").get<std::vector<std::size_t>>();
  if (d.curve.reserved.size() != d.curve.event.size() ||
      d.curve.allocated.size() != d.curve.event.size())
    throw format_error("a curve whose series differ in length");
  return d;
}

}  // namespace

advice advice_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    if (!j.is_object() || j.value("command", std::string()) != "advise")
      throw format_error("not an advice file (its \"command\" is not \"advise\")");
    if (j.at("schema_version").get<int>() != 1)
      throw format_error("an advice file of another schema version than 1");
    advice a;
    a.file = j.at("snapshot").get<std::string>();
    a.device = j.at("device").get<int>();
    a.trace_events = j.at("trace_events").get<std::size_t>();
    a.replay_events = j.at("replay_events").get<std::size_t>();
    a.live_peak = j.at("live_peak_bytes").get<std::size_t>();
    const auto& rec = j.at("recorded");
    if (!rec.at("alloc_conf").is_null()) a.recorded_conf = rec.at("alloc_conf").get<std::string>();
    a.recorded.peak_reserved = rec.at("peak_reserved_bytes").get<std::uint64_t>();
    a.recorded.ooms = rec.at("ooms").get<std::size_t>();
    a.gc_reserved_limit = j.at("gc_reserved_limit_bytes").get<std::uint64_t>();
    a.fit_limits = j.at("fit_limits_bytes").get<std::vector<std::size_t>>();
    for (const auto& e : j.at("policies")) {
      policy_outcome p;
      p.conf = e.at("conf").get<std::string>();
      p.knobs = e.at("keys").get<int>();
      if (e.at("failure").is_null()) {
        replay_result r;
        r.peak_reserved = e.at("peak_reserved_bytes").get<std::size_t>();
        r.peak_allocated = e.at("peak_allocated_bytes").get<std::size_t>();
        r.backend_allocations = e.at("backend_allocations").get<std::int64_t>();
        r.fragmentation_at_peak = e.at("fragmentation_at_peak").get<double>();
        p.result = r;
      } else {
        p.failure = e.at("failure").get<std::string>();
      }
      for (const auto& f : e.at("fits")) p.fits.push_back(fit_from_json(f));
      if (p.fits.size() != a.fit_limits.size())
        throw format_error("a policy whose fits do not match fit_limits_bytes");
      a.policies.push_back(std::move(p));
    }
    if (a.policies.empty() || !a.policies.front().conf.empty())
      throw format_error("policies that do not start with the defaults");
    a.defaults = detail_from_json(j.at("defaults"), a.policies);
    a.recommendation = detail_from_json(j.at("recommendation"), a.policies);
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
    for (const auto& c : j.at("fit_choice")) {
      std::optional<std::size_t> choice;
      if (!c.is_null()) {
        const auto conf = c.get<std::string>();
        for (std::size_t i = 0; i < a.policies.size(); ++i)
          if (a.policies[i].conf == conf) choice = i;
      }
      a.fit_choice.push_back(choice);
    }
    if (a.fit_choice.size() != a.fit_limits.size())
      throw format_error("fit_choice does not match fit_limits_bytes");
    a.fit_choice_everywhere.assign(a.fit_limits.size(), true);
    if (const auto e = j.find("fit_choice_everywhere"); e != j.end()) {  // newer advice
      a.fit_choice_everywhere = e->get<std::vector<bool>>();
      if (a.fit_choice_everywhere.size() != a.fit_limits.size())
        throw format_error("fit_choice_everywhere does not match fit_limits_bytes");
    }
    a.seconds = j.at("seconds").get<double>();
    a.threads = j.at("threads").get<unsigned>();
    return a;
  } catch (const format_error& e) {
    throw format_error(source + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw format_error(source + ": not an advice file that can be read: " +
                       message_line(json_path_error_of(e).what(), 160));
  }
}

}  // namespace gpu_basics

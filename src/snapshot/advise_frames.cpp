// Where in the user's code: the Python frames of the requests advice names (the request that set
// peak reserved, the one that first fails under a limit), read from the snapshot file again with
// the trace entries' frames kept, for those requests only. The first read leaves frames out (they
// are most of a snapshot's bytes); this one keeps a handful. From pickle bytes in memory, the
// read can instead go beside the first one, before the requests are known (read_all_frames()):
// it keeps every alloc's frames as read, shared, not formatted, within a budget of values.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "advise_frames.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "snapshot_file.hpp"

namespace gpu_basics {

namespace {

using pickle::value;

/// The most characters of one frame's "file:line in name" kept (a longer one is cut, "..." after
/// it): what names a site, bounded, whatever the snapshot's strings.
constexpr std::size_t kMaxFrameChars = 512;

/// The most frames kept per request advice names.
constexpr std::size_t kFramesKept = 16;

/// "file:line in name" per frame of a trace entry (innermost first, as PyTorch records them),
/// at most `most`: its Python frames (files ending in .py), or where it has none, whatever frames
/// it has (PyTorch's default stacks="all" puts C++ frames first, which would hide the Python
/// ones under any cap); frames that are not dicts of those keys are left out.
std::vector<std::string> frames_in(const value* frames, std::size_t most) {
  std::vector<std::string> out, other;
  if (!frames || !(frames->is(value::type::list) || frames->is(value::type::tuple))) return out;
  for (const value& f : frames->as_items()) {
    if (out.size() == most) break;
    const value* file = f.find("filename");
    const value* line = f.find("line");
    const value* name = f.find("name");
    if (!file || !file->is(value::type::str)) continue;
    std::string s = file->as_str();
    if (line && line->is(value::type::integer)) s += fmt::format(":{}", line->as_int());
    if (name && name->is(value::type::str)) s += " in " + name->as_str();
    if (s.size() > kMaxFrameChars) {  // a frame's text bounded: a trace holds many of them
      s.resize(kMaxFrameChars);
      s += "...";
    }
    if (file->as_str().ends_with(".py"))
      out.push_back(std::move(s));
    else if (other.size() < most)
      other.push_back(std::move(s));
  }
  return out.empty() ? other : out;
}

/// frames_in() of a trace entry's frames.
std::vector<std::string> frames_of(const value& entry, std::size_t most) {
  return frames_in(entry.find("frames"), most);
}

bool is_alloc_entry(const value& entry) {
  const value* action = entry.find("action");
  return action && action->is(value::type::str) && action->as_str() == "alloc";
}

/// The most values (pickle::value::tree_values()) of the frames a read made before the wanted
/// ones are known keeps: about 100k entries of a dozen unshared frames. Past it, none are kept.
constexpr std::uint64_t kMostValuesKept = std::uint64_t{10} << 20;

/// Counts each list's alloc entries as read() appends them, keeping the frames of the wanted
/// ones (`wanted` null: every one's frames as read, within kMostValuesKept, for a read made
/// before the wanted ones are known); what it does not take stays in the lists, counted
/// afterwards (frames()).
class frames_sink final : public pickle::item_sink {
 public:
  frames_sink(const std::set<std::size_t>* wanted, std::size_t most)
      : wanted_(wanted), most_(most) {}

  bool take(std::uint64_t list, const value& item) override {
    const value* action = item.find("action");
    if (!action || !action->is(value::type::str)) return false;
    auto& l = lists_[list];
    const bool alloc = action->as_str() == "alloc";
    if (action->as_str() == "oom") l.last_oom = frames_of(item, most_);
    l.kinds.push_back(alloc);
    if (alloc) {
      if (!wanted_)
        keep(l, item.find("frames"));
      else if (wanted_->count(l.allocs))
        l.frames[l.allocs] = frames_of(item, most_);
      ++l.allocs;
    }
    return true;
  }
  bool take(std::uint64_t list, std::span<const pickle::flat_entry> item) override {
    const pickle::flat_entry* action = nullptr;
    for (const auto& e : item)
      if (e.key == "action") action = &e;
    if (!action || !action->is(value::type::str)) return false;
    auto& l = lists_[list];
    const bool alloc = action->as_str() == "alloc";
    if (action->as_str() == "oom") l.last_oom.clear();  // the last oom has none
    l.kinds.push_back(alloc);                           // a flat dict has no frames: counted only
    if (alloc && !wanted_) keep(l, nullptr);
    l.allocs += alloc ? 1 : 0;
    return true;
  }
  void untake(std::uint64_t list, std::size_t n) override {
    auto& l = lists_[list];
    for (; n != 0 && !l.kinds.empty(); --n) {
      if (l.kinds.back()) {
        l.frames.erase(--l.allocs);
        if (l.kept.size() > l.allocs) l.kept.pop_back();
      }
      l.kinds.pop_back();
    }
  }
  void clear() override { lists_.clear(); }

  /// Whether every alloc's frames were kept (always, when the wanted ones were given).
  [[nodiscard]] bool complete() const { return wanted_ || kept_values_ <= kMostValuesKept; }

  /// The frames `wanted` names of the list `id` (its taken entries, then the entries left in
  /// it), and how many alloc entries it holds.
  alloc_frames frames(std::uint64_t id, const value& list, const std::set<std::size_t>& wanted) {
    list_state l;
    if (const auto it = lists_.find(id); id != 0 && it != lists_.end()) l = std::move(it->second);
    for (const std::size_t k : wanted)  // kept before the wanted ones were known
      if (k < l.kept.size()) l.frames[k] = frames_in(l.kept[k] ? &*l.kept[k] : nullptr, most_);
    for (const value& e : list.as_items()) {
      if (const value* action = e.find("action");
          action && action->is(value::type::str) && action->as_str() == "oom")
        l.last_oom = frames_of(e, most_);
      if (!is_alloc_entry(e)) continue;
      if (wanted.count(l.allocs)) l.frames[l.allocs] = frames_of(e, most_);
      ++l.allocs;
    }
    return {std::move(l.frames), l.allocs, std::move(l.last_oom)};
  }

 private:
  struct list_state {
    std::vector<bool> kinds;  // per taken entry: an alloc
    std::size_t allocs = 0;
    std::map<std::size_t, std::vector<std::string>> frames;
    std::vector<std::string> last_oom;
    std::vector<std::optional<value>> kept;  // per alloc, its frames (`wanted` null)
  };

  /// An alloc's frames kept (`wanted` null): shared with the value read, not copied.
  void keep(list_state& l, const value* frames) {
    if (!complete()) return;
    if (frames) kept_values_ += frames->tree_values();
    if (!complete()) {  // past the budget: none kept
      for (auto& [id, other] : lists_) std::vector<std::optional<value>>().swap(other.kept);
      return;
    }
    l.kept.emplace_back(frames ? std::optional<value>(*frames) : std::nullopt);
  }

  const std::set<std::size_t>* wanted_;
  std::size_t most_;
  std::map<std::uint64_t, list_state> lists_;
  std::uint64_t kept_values_ = 0;
};

/// The ordinal among the trace's allocs of replayed event `i` (after the `rebuilt` allocs of
/// blocks alive before recording, which have no entry): none for those and for frees.
std::optional<std::size_t> alloc_ordinal(const std::vector<replay_event>& events,
                                         std::size_t rebuilt, std::size_t i) {
  if (i < rebuilt || i >= events.size() || events[i].kind != replay_event::op::alloc) return {};
  std::size_t n = 0;
  for (std::size_t k = rebuilt; k < i; ++k) n += events[k].kind == replay_event::op::alloc;
  return n;
}

/// The root of the pickle `read` reads with `sink` taking the trace entries.
value read_with(const snapshot_pickle_read& read, std::string_view name, frames_sink& sink) {
  try {
    return read(pickle::read_options{{}, {}, &sink});
  } catch (const format_error& e) {
    throw format_error(fmt::format("{}: {}", name, e.what()));
  }
}

/// The frames of `device`'s alloc entries numbered `ordinals` from the root of a read that
/// `sink` took the entries of.
alloc_frames frames_at(const value& root, frames_sink& sink, int device,
                       const std::set<std::size_t>& ordinals) {
  const value* traces = root.find("device_traces");
  if (!traces || !traces->is(value::type::list) ||
      static_cast<std::size_t>(device) >= traces->as_items().size())
    return {};
  const value& list = traces->as_items()[static_cast<std::size_t>(device)];
  if (!list.is(value::type::list)) return {};
  return sink.frames(list.taken() ? list.list_id() : 0, list, ordinals);
}

/// read_alloc_frames() of the pickle `read` reads.
alloc_frames frames_from(const snapshot_pickle_read& read, std::string_view name, int device,
                         const std::set<std::size_t>& ordinals, std::size_t most) {
  frames_sink sink(&ordinals, most);
  const value root = read_with(read, name, sink);
  return frames_at(root, sink, device, ordinals);
}

/// attach_frames() with the frames `read` gives for a set of ordinals; `failed`: the trace's last
/// alloc is replay_failed_request()'s, which the pickle holds as an oom entry.
bool attach_with(advice& a, const torch_snapshot& s, std::string_view name, bool failed,
                 const std::function<alloc_frames(const std::set<std::size_t>&)>& read) {
  std::size_t rebuilt = 0;
  const std::vector<replay_event> events = to_replay_trace(s, a.device, &rebuilt);
  // The requests advice names: per detailed policy, the one that set peak reserved and peak
  // allocated, and the first that failed under each limit and under a page below its smallest.
  std::vector<std::pair<std::size_t, std::vector<std::string>*>> named;
  const auto add = [&](std::size_t event, std::vector<std::string>& frames) {
    named.emplace_back(event, &frames);
  };
  for (policy_detail* d : {&a.defaults, &a.recommendation}) {
    add(d->stranded.event, d->stranded.frames);
    add(d->stranded_at_allocated.event, d->stranded_at_allocated.frames);
    if (d->below.oom) add(d->below.oom->event, d->below.oom->frames);
    for (auto& f : a.policies.at(d->index).fits)
      if (f.oom) add(f.oom->event, f.oom->frames);
  }
  std::set<std::size_t> wanted;
  std::vector<std::optional<std::size_t>> ordinal;
  for (const auto& [event, frames] : named) {
    ordinal.push_back(alloc_ordinal(events, rebuilt, event));
    if (ordinal.back()) wanted.insert(*ordinal.back());
  }
  alloc_frames found = read(wanted);
  std::size_t allocs = 0;
  for (std::size_t k = rebuilt; k < events.size(); ++k)
    allocs += events[k].kind == replay_event::op::alloc;
  if (failed && allocs != 0) {  // the oom entry that became the last alloc
    --allocs;
    if (!found.last_oom.empty()) found.frames[allocs] = std::move(found.last_oom);
  }
  if (!wanted.empty() && found.allocs != allocs)  // another file now
    throw format_error(fmt::format(
        "{}: the second read found {} allocations on device {}, the first {}: the file changed "
        "between them",
        name, found.allocs, a.device, allocs));
  bool any = false;
  for (std::size_t k = 0; k < named.size(); ++k) {
    if (!ordinal[k]) continue;
    const auto it = found.frames.find(*ordinal[k]);
    if (it == found.frames.end() || it->second.empty()) continue;
    *named[k].second = it->second;
    any = true;
  }
  return any;
}

}  // namespace

alloc_frames read_alloc_frames(const std::string& path, int device,
                               const std::set<std::size_t>& ordinals, std::size_t most) {
  alloc_frames out;
  if (ordinals.empty() || device < 0) return out;
  with_snapshot_pickle(path, [&](const snapshot_pickle_read& read, std::string_view name) {
    out = frames_from(read, name, device, ordinals, most);
  });
  return out;
}

bool attach_frames_with(advice& a, const torch_snapshot& s, std::string_view name, bool failed,
                        const alloc_frames_read& read) {
  return attach_with(a, s, name, failed, [&](const std::set<std::size_t>& wanted) {
    if ((wanted.empty() && !failed) || a.device < 0) return alloc_frames{};
    return read(a.device, wanted);
  });
}

bool attach_frames(advice& a, const torch_snapshot& s, const std::string& path, bool failed) {
  return attach_frames_with(
      a, s, printable(path), failed, [&](int device, const std::set<std::size_t>& wanted) {
        alloc_frames out;
        with_snapshot_pickle(path, [&](const snapshot_pickle_read& read, std::string_view name) {
          out = frames_from(read, name, device, wanted, kFramesKept);
        });
        return out;
      });
}

bool attach_frames_from_bytes(advice& a, const torch_snapshot& s, std::string_view bytes,
                              std::string_view name, bool failed) {
  return attach_frames_with(
      a, s, name, failed, [&](int device, const std::set<std::size_t>& wanted) {
        return frames_from(
            [bytes](const pickle::read_options& o) { return pickle::read(bytes, o); }, name, device,
            wanted, kFramesKept);
      });
}

alloc_frames_read read_all_frames(std::string_view bytes, std::string_view name) {
  const snapshot_pickle_read read = [bytes](const pickle::read_options& o) {
    return pickle::read(bytes, o);
  };
  auto sink = std::make_shared<frames_sink>(nullptr, kFramesKept);
  auto root = std::make_shared<const value>(read_with(read, name, *sink));
  return [sink, root, read, name](int device, const std::set<std::size_t>& wanted) {
    if (!sink->complete())  // too many to keep: read again for the wanted ones
      return frames_from(read, name, device, wanted, kFramesKept);
    return frames_at(*root, *sink, device, wanted);
  };
}

}  // namespace gpu_basics

// PyTorch memory snapshots: the dict _dump_snapshot pickles (torch/csrc/cuda/memory_snapshot.cpp
// names the keys), written from a caching_allocator and read back into typed structs.
#include "gpu_basics/snapshot/snapshot.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/gzip.hpp"
#include "gpu_basics/core/input_file.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "huge_pages.hpp"
#include "snapshot_file.hpp"

namespace gpu_basics {

namespace {

using pickle::value;

value int_value(std::uint64_t v) {
  return value::integer(static_cast<std::int64_t>(v));
}

value empty_frames() {
  return value::list();
}

value block_dict(const block_view& b) {
  value d = value::dict();
  d.set("address", int_value(b.ptr));
  d.set("size", int_value(b.size));
  d.set("requested_size", int_value(b.requested));
  d.set("state", value::str(std::string(to_string(b.state))));
  d.set("frames", empty_frames());
  return d;
}

value segment_dict(const segment_view& s, int device) {
  value d = value::dict();
  d.set("device", value::integer(device));
  d.set("address", int_value(s.ptr));
  d.set("total_size", int_value(s.total_size));
  d.set("allocated_size", int_value(s.allocated_size));
  d.set("active_size", int_value(s.active_size));
  d.set("requested_size", int_value(s.requested_size));
  d.set("stream", int_value(s.stream));
  d.set("segment_type", value::str(s.small ? "small" : "large"));
  d.set("segment_pool_id", value::tuple({value::integer(0), value::integer(0)}));
  d.set("is_expandable", value::boolean(s.expandable));
  d.set("frames", empty_frames());
  value blocks = value::list();
  for (const auto& b : s.blocks)
    if (b.mapped) blocks.append(block_dict(b));
  d.set("blocks", std::move(blocks));
  return d;
}

value trace_entry(std::string_view action, const history_event& e) {
  value d = value::dict();
  d.set("action", value::str(std::string(action)));
  if (e.kind == history_kind::oom)
    d.set("device_free", value::integer(0));  // not kept in our history
  else
    d.set("addr", int_value(e.ptr));
  d.set("size", int_value(e.bytes));
  d.set("stream", int_value(e.stream));
  d.set("time_us", int_value(e.time_ns / 1000));
  d.set("frames", empty_frames());
  return d;
}

value device_trace(const std::vector<history_event>& h) {
  // A free is followed by its free_completed unless the history records one later (a block
  // awaiting other streams' events): find those first, walking backwards.
  std::vector<bool> completes_now(h.size(), false);
  std::unordered_map<std::uintptr_t, bool> completed_later;
  for (std::size_t i = h.size(); i-- > 0;) {
    const auto& e = h[i];
    if (e.kind == history_kind::free_completed) {
      completed_later[e.ptr] = true;
    } else if (e.kind == history_kind::free) {
      completes_now[i] = !completed_later[e.ptr];
      completed_later[e.ptr] = false;
    } else if (e.kind == history_kind::alloc) {
      completed_later[e.ptr] = false;
    }
  }
  value trace = value::list();
  for (std::size_t i = 0; i < h.size(); ++i) {
    const auto& e = h[i];
    if (e.kind == history_kind::free) {
      trace.append(trace_entry("free_requested", e));
      if (completes_now[i]) trace.append(trace_entry("free_completed", e));
    } else {
      trace.append(trace_entry(to_string(e.kind), e));
    }
  }
  return trace;
}

value allocator_settings(const allocator_options& o) {
  value d = value::dict();
  d.set("PYTORCH_CUDA_ALLOC_CONF", value::str(to_conf_string(o)));
  d.set("max_split_size",
        value::integer(o.max_split_size == SIZE_MAX ? -1
                                                    : static_cast<std::int64_t>(o.max_split_size)));
  d.set("garbage_collection_threshold", value::real(o.garbage_collection_threshold));
  d.set("expandable_segments", value::boolean(o.expandable_segments));
  value divisions = value::dict();
  std::int64_t interval_mib = 1;
  for (std::size_t i = 0; i < kRoundupIntervals; ++i, interval_mib *= 2)
    divisions.set(std::to_string(interval_mib),
                  value::integer(static_cast<std::int64_t>(o.roundup_power2_divisions[i])));
  d.set("roundup_power2_divisions", std::move(divisions));
  return d;
}

value snapshot_value(const std::vector<segment_view>& segments,
                     const std::vector<history_event>& history, int device,
                     const allocator_options& options) {
  value root = value::dict();
  value segs = value::list();
  for (const auto& s : segments) segs.append(segment_dict(s, device));
  root.set("segments", std::move(segs));
  value traces = value::list();
  for (int d = 0; d < device; ++d) traces.append(value::list());
  traces.append(device_trace(history));
  root.set("device_traces", std::move(traces));
  root.set("allocator_settings", allocator_settings(options));
  root.set("external_annotations", value::list());
  return root;
}

}  // namespace

void write_snapshot(std::ostream& out, const std::vector<segment_view>& segments,
                    const std::vector<history_event>& history, int device,
                    const allocator_options& options) {
  if (device < 0) throw logic_error("write_snapshot: device must be >= 0");
  pickle::write(out, snapshot_value(segments, history, device, options));
}

void write_snapshot(const std::string& path, const std::vector<segment_view>& segments,
                    const std::vector<history_event>& history, int device,
                    const allocator_options& options) {
  std::ostringstream s;
  write_snapshot(s, segments, history, device, options);
  write_file_atomically(path, std::move(s).str());
}

// ---- reading ------------------------------------------------------------------------------

int torch_snapshot::busiest_device() const noexcept {
  int best = 0;
  for (std::size_t d = 0; d < device_traces.size(); ++d)
    if (device_traces[d].size() > device_traces[static_cast<std::size_t>(best)].size())
      best = static_cast<int>(d);
  return best;
}

namespace {

/// The longest str field read (an action, a state, the allocator conf): a longer one, however
/// often the pickle reuses it, is refused rather than copied.
constexpr std::size_t kMaxText = 4096;

/// A dict the pickle reader offered as flat entries (a trace entry), found as a value's.
struct flat_dict {
  std::span<const pickle::flat_entry> entries;
  [[nodiscard]] const pickle::flat_entry* find(std::string_view key) const {
    for (const auto& e : entries)
      if (e.key == key) return &e;
    return nullptr;
  }
};

/// Reads fields of one dict (a value, or a flat_dict), naming where it is in messages.
template <typename Dict>
class basic_fields {
 public:
  /// `where` names the dict, followed by "[index]" when `index` is given (the message is made
  /// only on failure: a trace has millions of dicts).
  basic_fields(const Dict& v, std::string_view file, std::string_view where,
               std::size_t index = std::string::npos)
      : v_(v), file_(file), where_(where), index_(index) {
    throw_if_interrupted();  // once per dict read: Ctrl-C stops a long parse
    if constexpr (std::is_same_v<Dict, value>)
      if (!v.is(value::type::dict)) fail(fmt::format("is a {}, expected a dict", v.type_name()));
  }
  [[noreturn]] void fail(const std::string& what) const {
    if (index_ == std::string::npos)
      throw format_error(fmt::format("{}: {} {}", file_, where_, what));
    throw format_error(fmt::format("{}: {}[{}] {}", file_, where_, index_, what));
  }
  [[nodiscard]] auto find(std::string_view key) const { return v_.find(key); }
  [[nodiscard]] std::int64_t integer(std::string_view key, std::optional<std::int64_t> dflt) const {
    const auto* x = v_.find(key);
    if (!x || x->is(value::type::none)) {
      if (dflt) return *dflt;
      fail(fmt::format("has no '{}'", key));
    }
    if (x->is(value::type::boolean)) return x->as_bool() ? 1 : 0;
    if (!x->is(value::type::integer))
      fail(fmt::format("'{}' is a {}, expected an int", key, x->type_name()));
    return x->as_int();
  }
  [[nodiscard]] std::uint64_t size(std::string_view key, std::optional<std::int64_t> dflt) const {
    const std::int64_t i = integer(key, dflt);
    if (i < 0) fail(fmt::format("'{}' is negative ({})", key, i));
    return static_cast<std::uint64_t>(i);
  }
  [[nodiscard]] std::string text(std::string_view key, std::optional<std::string> dflt) const {
    const auto* x = v_.find(key);
    if (!x) {
      if (dflt) return *dflt;
      fail(fmt::format("has no '{}'", key));
    }
    if (!x->is(value::type::str))
      fail(fmt::format("'{}' is a {}, expected a str", key, x->type_name()));
    if (x->as_str().size() > kMaxText)
      fail(fmt::format("'{}' is a str of {} bytes; at most {} are read", key, x->as_str().size(),
                       kMaxText));
    return std::string(x->as_str());
  }
  [[nodiscard]] bool flag(std::string_view key) const {
    const auto* x = v_.find(key);
    if (!x || x->is(value::type::none)) return false;
    if (x->is(value::type::boolean)) return x->as_bool();
    if (x->is(value::type::integer)) return x->as_int() != 0;
    fail(fmt::format("'{}' is a {}, expected a bool", key, x->type_name()));
  }

 private:
  const Dict& v_;
  std::string_view file_;
  std::string_view where_;
  std::size_t index_;
};
using fields = basic_fields<value>;

torch_action action_of(std::string_view a) {
  if (a == "alloc") return torch_action::alloc;
  if (a == "free_requested") return torch_action::free_requested;
  if (a == "free_completed") return torch_action::free_completed;
  if (a == "segment_alloc") return torch_action::segment_alloc;
  if (a == "segment_free") return torch_action::segment_free;
  if (a == "segment_map") return torch_action::segment_map;
  if (a == "segment_unmap") return torch_action::segment_unmap;
  if (a == "oom") return torch_action::oom;
  if (a == "snapshot") return torch_action::snapshot;
  return torch_action::other;
}

/// Thrown where an item_sink took items from a list that is not a device trace (a dict with an
/// "action" where a segment or block is expected): the snapshot is read again without the sink.
struct needs_plain_read {};

const pickle::items& list_at(const value& parent, std::string_view key, std::string_view file,
                             const std::string& where) {
  const value* x = parent.find(key);
  if (!x) throw format_error(fmt::format("{}: {}has no '{}'", file, where, key));
  if (!x->is(value::type::list) && !x->is(value::type::tuple))
    throw format_error(
        fmt::format("{}: {}'{}' is a {}, expected a list", file, where, key, x->type_name()));
  if (x->taken() != 0) throw needs_plain_read{};
  return x->as_items();
}

/// One trace entry; `f` (fields of a value or of a flat_dict) names it in messages.
template <typename Fields>
torch_trace_event trace_event_of(const Fields& f) {
  torch_trace_event e;
  e.action = action_of(f.text("action", std::nullopt));
  e.addr = e.action == torch_action::oom ? f.size("device_free", 0) : f.size("addr", 0);
  e.size = f.size("size", 0);
  e.stream = f.integer("stream", 0);
  e.time_us = f.integer("time_us", 0);
  return e;
}

/// Takes trace entries as the pickle reader appends them to a list, as torch_trace_events: a
/// trace of millions of entries is never held as Python values. An entry it cannot read is left
/// in the list (and so is the rest of that list), where the snapshot's reading reads it again and
/// names the problem. The first list it takes from (the device trace, in a real snapshot) goes
/// into one vector with room for every dict of the pickle; any other, or any beyond that room,
/// goes in chunks joined at the end.
class trace_sink final : public pickle::item_sink {
 public:
  explicit trace_sink(std::string_view file) : file_(file) {}

  bool take(std::uint64_t list, const value& item) override {
    const value* action = item.find("action");  // a trace entry, not a segment or a block
    if (!action || !action->is(value::type::str)) return false;
    return add(list, [&] { return trace_event_of(fields(item, file_, "")); });
  }
  bool take(std::uint64_t list, std::span<const pickle::flat_entry> item) override {
    const flat_dict d{item};
    const auto* action = d.find("action");
    if (!action || !action->is(value::type::str)) return false;
    return add(list, [&] { return trace_event_of(basic_fields<flat_dict>(d, file_, "")); });
  }
  void untake(std::uint64_t list, std::size_t n) override {
    auto& chunks = lists_[list];  // the last taken: in chunks, then the first vector
    while (n != 0 && !chunks.empty()) {
      auto& c = chunks.back();
      const std::size_t k = std::min(n, c.size());
      c.resize(c.size() - k);
      n -= k;
      if (c.empty()) chunks.pop_back();
    }
    if (list == first_id_) first_.resize(first_.size() - n);
  }
  void clear() override {
    lists_.clear();
    std::vector<torch_trace_event>().swap(first_);
    first_id_ = 0;
    first_full_ = false;
  }
  void expect(std::uint64_t dicts) override { expected_ = dicts; }

  /// The entries taken from `list`, moved out (never twice in memory).
  std::vector<torch_trace_event> events(std::uint64_t list) {
    std::vector<torch_trace_event> out;
    if (list == first_id_) out.swap(first_);
    const auto it = lists_.find(list);
    if (it == lists_.end()) return out;
    std::size_t n = out.size();
    for (const auto& c : it->second) n += c.size();
    out.reserve(n);
    for (auto& c : it->second) {
      out.insert(out.end(), c.begin(), c.end());
      std::vector<torch_trace_event>().swap(c);
    }
    lists_.erase(it);
    return out;
  }

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 16;
  static constexpr std::uint64_t kMostReserved = std::uint64_t{1} << 26;  // 2.5 GB of events

  /// Adds the event `convert` makes; false when it throws format_error (not taken).
  template <typename Convert>
  bool add(std::uint64_t list, const Convert& convert) {
    torch_trace_event e;
    try {
      e = convert();
    } catch (const format_error&) {
      return false;
    }
    if (first_id_ == 0) {
      first_id_ = list;
      try {
        first_.reserve(static_cast<std::size_t>(std::min(expected_, kMostReserved)));
        detail::advise_huge_pages(first_.data(), first_.capacity() * sizeof(torch_trace_event));
      } catch (const std::bad_alloc&) {
        // The chunks below then.
      }
    }
    if (list == first_id_ && !first_full_) {
      if (first_.size() < first_.capacity()) {
        first_.push_back(e);
        return true;
      }
      first_full_ = true;  // the rest in chunks
    }
    auto& chunks = lists_[list];
    if (chunks.empty() || chunks.back().size() == kChunk) {
      chunks.emplace_back();
      chunks.back().reserve(kChunk);
    }
    chunks.back().push_back(e);
    return true;
  }

  std::string_view file_;
  std::uint64_t expected_ = 0;
  std::uint64_t first_id_ = 0;
  std::vector<torch_trace_event> first_;
  bool first_full_ = false;
  std::unordered_map<std::uint64_t, std::vector<std::vector<torch_trace_event>>> lists_;
};

constexpr std::string_view kHowToRecord =
    "record one with torch.cuda.memory._record_memory_history(max_entries=100000) before the "
    "workload and torch.cuda.memory._dump_snapshot(\"snapshot.pickle\") after it";

}  // namespace

namespace {
/// Refuses `head` (a snapshot's first bytes, or all of them) when it cannot start a snapshot.
void check_snapshot_start(std::string_view head, std::string_view name) {
  if (head.empty())
    throw format_error(fmt::format("{}: empty file, not a PyTorch memory snapshot", name));
  if (static_cast<unsigned char>(head[0]) != 0x80)
    throw format_error(
        fmt::format("{}: not a pickle (a PyTorch memory snapshot is one, from "
                    "torch.cuda.memory._dump_snapshot)",
                    name));
  try {
    pickle::check_start(head);
  } catch (const format_error& e) {
    throw format_error(fmt::format("{}: {}", name, e.what()));
  }
}
}  // namespace

namespace {
/// The snapshot in `root`; the entries that `sink` took are its (nullptr: none taken).
/// @throws format_error as parse_torch_snapshot(); needs_plain_read.
torch_snapshot snapshot_of(const value& root, std::string_view name, trace_sink* sink) {
  if (!root.is(value::type::dict))
    throw format_error(
        fmt::format("{}: a pickle of a {}, not a PyTorch memory snapshot (a dict with segments and "
                    "device_traces)",
                    name, root.type_name()));
  if (!root.find("segments"))
    throw format_error(
        fmt::format("{}: a pickled dict without 'segments': not a PyTorch memory snapshot", name));
  if (!root.find("device_traces"))
    throw format_error(
        fmt::format("{}: a snapshot without 'device_traces' (taken without recording history): {}",
                    name, kHowToRecord));
  torch_snapshot s;
  const auto& segs = list_at(root, "segments", name, "");
  s.segments.reserve(segs.size());
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const std::string where = fmt::format("segments[{}]", i);
    const fields f(segs[i], name, "segments", i);
    torch_segment seg;
    seg.device = static_cast<int>(f.integer("device", 0));
    seg.address = f.size("address", std::nullopt);
    seg.total_size = f.size("total_size", std::nullopt);
    seg.allocated_size = f.size("allocated_size", 0);
    seg.active_size = f.size("active_size", 0);
    seg.requested_size = f.size("requested_size", 0);
    seg.stream = f.integer("stream", 0);
    seg.small = f.text("segment_type", "large") == "small";
    seg.expandable = f.flag("is_expandable");
    if (f.find("blocks")) {
      const auto& blocks = list_at(segs[i], "blocks", name, where + ".");
      const std::string blocks_where = where + ".blocks";
      std::uint64_t addr = seg.address;
      for (std::size_t k = 0; k < blocks.size(); ++k) {
        const fields b(blocks[k], name, blocks_where, k);
        torch_block blk;
        blk.address = b.size("address", static_cast<std::int64_t>(addr));
        blk.size = b.size("size", std::nullopt);
        blk.requested_size = b.size("requested_size", static_cast<std::int64_t>(blk.size));
        blk.state = b.text("state", "inactive");
        addr = blk.address + blk.size;
        seg.blocks.push_back(std::move(blk));
      }
    }
    s.segments.push_back(std::move(seg));
  }
  const auto& traces = list_at(root, "device_traces", name, "");
  std::size_t events = 0;
  std::unordered_map<std::uint64_t, std::size_t> seen;  // a list's id -> its first device
  for (std::size_t d = 0; d < traces.size(); ++d) {
    const std::string where = fmt::format("device_traces[{}]", d);
    if (!traces[d].is(value::type::list))
      throw format_error(
          fmt::format("{}: {} is a {}, expected a list", name, where, traces[d].type_name()));
    const auto& entries = traces[d].as_items();
    const std::size_t taken = traces[d].taken();  // the first entries, which `sink` holds
    if (taken != 0) {
      if (const auto it = seen.find(traces[d].list_id()); it != seen.end()) {  // the same list
        auto again = s.device_traces[it->second];
        events += again.size();
        s.device_traces.push_back(std::move(again));
        continue;
      }
      seen.emplace(traces[d].list_id(), d);
    }
    std::vector<torch_trace_event> out;
    if (taken != 0 && sink) out = sink->events(traces[d].list_id());
    out.reserve(taken + entries.size());
    for (std::size_t k = 0; k < entries.size(); ++k)
      out.push_back(trace_event_of(fields(entries[k], name, where, taken + k)));
    events += out.size();
    s.device_traces.push_back(std::move(out));
  }
  if (events == 0)
    throw format_error(fmt::format(
        "{}: the snapshot's device_traces are empty (taken without recording history): {}", name,
        kHowToRecord));
  if (const value* settings = root.find("allocator_settings");
      settings && settings->is(value::type::dict))
    if (const value* conf = settings->find("PYTORCH_CUDA_ALLOC_CONF");
        conf && conf->is(value::type::str))
      s.alloc_conf = fields(*settings, name, "allocator_settings")
                         .text("PYTORCH_CUDA_ALLOC_CONF", std::nullopt);
  return s;
}

/// The root value that `read` (pickle::read() of the snapshot's bytes with the options it is
/// given) returns, messages naming `name`.
template <typename Read>
value root_of(const Read& read, const pickle::read_options& options, std::string_view name) {
  try {
    return read(options);
  } catch (const format_error& e) {
    throw format_error(fmt::format("{}: {}", name, e.what()));
  }
}

/// The snapshot that `read` reads: its trace entries taken as they are read, frames left out;
/// read again without either should they not apply (see pickle::read_options).
template <typename Read>
torch_snapshot parse_snapshot(const Read& read, std::string_view name) {
  trace_sink sink(name);
  try {
    return snapshot_of(root_of(read, pickle::read_options{{}, {"frames"}, &sink}, name), name,
                       &sink);
  } catch (const needs_plain_read&) {
    // A dict with an "action" where no trace is: below.
  }
  sink.clear();
  return snapshot_of(root_of(read, pickle::read_options{}, name), name, nullptr);
}

/// A snapshot file as the pickle reader's byte source.
class file_source final : public pickle::byte_source {
 public:
  file_source(const std::string& path, std::uint64_t cap) : in_(path, cap, "snapshot pickle") {}
  std::size_t read(char* out, std::size_t n) override { return in_.read(out, n); }
  void rewind() override { in_.rewind(); }
  [[nodiscard]] std::optional<std::uint64_t> size() const override { return in_.size(); }

 private:
  input_reader in_;
};
}  // namespace

torch_snapshot parse_torch_snapshot(std::string_view bytes, std::string_view name) {
  check_snapshot_start(bytes.substr(0, 64), name);
  return parse_snapshot([bytes](const pickle::read_options& o) { return pickle::read(bytes, o); },
                        name);
}

void with_snapshot_pickle(const std::string& path, const snapshot_pickle_use& use) {
  const std::uint64_t cap = input_size_cap(kMaxSnapshotFileBytes);
  const std::string head = read_input_head(path, 64, cap, "snapshot pickle");
  if (is_gzip(head)) {  // snapshot.pickle.gz: inflated whole (within the cap), then read
    // The first inflated bytes must start a pickle: a bomb that is not one stops there.
    const std::string bytes =
        gunzip(read_input_file(path, cap, "snapshot pickle"), cap, printable(path),
               [&](std::string_view inflated) { check_snapshot_start(inflated, printable(path)); });
    check_snapshot_start(std::string_view(bytes).substr(0, 64), printable(path));
    use([&bytes](const pickle::read_options& o) { return pickle::read(bytes, o); },
        printable(path));
    return;
  }
  // The first bytes first: a file that is not a pickle is refused before the rest is read.
  check_snapshot_start(head, printable(path));
  file_source in(path, cap);
  use([&in](const pickle::read_options& o) { return pickle::read(in, o); }, printable(path));
}

torch_snapshot read_torch_snapshot(const std::string& path) {
  torch_snapshot s;
  with_snapshot_pickle(path, [&](const snapshot_pickle_read& read, std::string_view name) {
    s = parse_snapshot(read, name);
  });
  return s;
}

torch_snapshot torch_snapshot_of(const std::vector<replay_event>& trace) {
  torch_snapshot s;
  auto& out = s.device_traces.emplace_back();
  out.reserve(trace.size());
  std::unordered_map<std::uint64_t, replay_event> live;
  for (const replay_event& e : trace) {
    torch_trace_event t;
    t.addr = e.id;
    t.stream = static_cast<std::int64_t>(e.stream);
    if (e.kind == replay_event::op::alloc) {
      t.action = torch_action::alloc;
      t.size = e.bytes;
      live[e.id] = e;
    } else {
      const replay_event& a = live[e.id];
      t.action = torch_action::free_requested;
      t.size = a.bytes;
      t.stream = static_cast<std::int64_t>(a.stream);
    }
    out.push_back(t);
  }
  return s;
}

std::vector<replay_event> to_replay_trace(const torch_snapshot& s, int device,
                                          std::size_t* rebuilt) {
  std::vector<replay_event> head, body;
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) {
    if (rebuilt) *rebuilt = 0;
    return {};
  }
  const auto& trace = s.device_traces[static_cast<std::size_t>(device)];
  std::unordered_map<std::uint64_t, const torch_block*> final_blocks;
  for (const auto& seg : s.segments)
    if (seg.device == device)
      for (const auto& b : seg.blocks) final_blocks.emplace(b.address, &b);
  enum class st : std::uint8_t { live, requested, done };
  std::unordered_map<std::uint64_t, st> state;  // per address: few, reused again and again
  std::unordered_map<std::uint64_t, std::size_t> requested_at;  // a requested free's index
  std::vector<std::size_t> moved;  // the first places of frees moved to their free_completed
  body.reserve(trace.size());
  const auto alive_at_start = [&](const torch_trace_event& e) {
    std::uint64_t size = e.size;
    if (size == 0)
      if (const auto it = final_blocks.find(e.addr); it != final_blocks.end())
        size = it->second->requested_size ? it->second->requested_size : it->second->size;
    if (size == 0) return false;  // unknown: its free is skipped by the replay
    head.push_back({replay_event::op::alloc, e.addr, size, static_cast<stream_handle>(e.stream)});
    return true;
  };
  const auto free_of = [](const torch_trace_event& e) {
    return replay_event{replay_event::op::free, e.addr, 0, static_cast<stream_handle>(e.stream)};
  };
  for (const auto& e : trace) {
    switch (e.action) {
      case torch_action::alloc:
        body.push_back(
            {replay_event::op::alloc, e.addr, e.size, static_cast<stream_handle>(e.stream)});
        state[e.addr] = st::live;
        break;
      case torch_action::free_requested:
      case torch_action::free_completed: {
        // A free takes effect at free_requested, where free_completed follows at once; a block
        // used on another stream (record_stream) is held until its events complete, and is
        // free only at free_completed: its free moves there.
        const bool completed = e.action == torch_action::free_completed;
        const auto it = state.find(e.addr);
        const bool live = it == state.end() ? alive_at_start(e) : it->second == st::live;
        if (live) {
          if (!completed) requested_at[e.addr] = body.size();
          body.push_back(free_of(e));
        } else if (completed && it != state.end() && it->second == st::requested) {
          if (const auto r = requested_at.find(e.addr); r != requested_at.end()) {
            if (r->second + 1 != body.size()) {  // held while other events ran: free it now
              moved.push_back(r->second);
              body.push_back(free_of(e));
            }
            requested_at.erase(r);
          }
        }
        if (it == state.end() || it->second == st::live || completed)
          state[e.addr] = completed ? st::done : st::requested;
        break;
      }
      default:
        break;
    }
  }
  // Blocks allocated before recording began and never freed in it.
  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    for (const auto& b : seg.blocks) {
      if (b.state != "active_allocated" && b.state != "active_pending_free") continue;
      if (state.count(b.address)) continue;
      const std::uint64_t size = b.requested_size ? b.requested_size : b.size;
      if (size == 0) continue;
      head.push_back(
          {replay_event::op::alloc, b.address, size, static_cast<stream_handle>(seg.stream)});
    }
  }
  if (!moved.empty()) {  // the frees that moved later leave their first place
    std::sort(moved.begin(), moved.end());
    std::size_t next = 0, out = 0;
    for (std::size_t i = 0; i < body.size(); ++i) {
      if (next < moved.size() && moved[next] == i) {
        ++next;
        continue;
      }
      body[out++] = body[i];
    }
    body.resize(out);
  }
  if (rebuilt) *rebuilt = head.size();
  body.insert(body.begin(), head.begin(), head.end());  // in place: the body is the large part
  return body;
}

recorded_figures recorded(const torch_snapshot& s, int device) {
  return recorded(s, device, to_replay_trace(s, device));
}

namespace {
/// a + b, or a format_error: segment sizes that overflow are a broken or hostile snapshot.
std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw format_error(
        "the snapshot's segment sizes add up beyond 64 bits (a trace no device could record)");
  return r;
}
std::int64_t signed_size(std::uint64_t size) {
  if (size > static_cast<std::uint64_t>(INT64_MAX)) return checked_add(INT64_MAX, 1);  // throws
  return static_cast<std::int64_t>(size);
}
}  // namespace

namespace {
bool has_device(const torch_snapshot& s, int device) {
  return device >= 0 && static_cast<std::size_t>(device) < s.device_traces.size();
}

/// recorded() but for peak_requested.
recorded_figures recorded_segments(const torch_snapshot& s, int device) {
  recorded_figures r;
  if (!has_device(s, device)) return r;
  const auto& trace = s.device_traces[static_cast<std::size_t>(device)];
  r.events = trace.size();
  std::int64_t net = 0;
  for (const auto& e : trace) {
    switch (e.action) {
      case torch_action::segment_alloc:
      case torch_action::segment_map:
        net = checked_add(net, signed_size(e.size));
        ++r.backend_allocations;
        break;
      case torch_action::segment_free:
      case torch_action::segment_unmap:
        net = checked_add(net, -signed_size(e.size));
        break;
      case torch_action::oom:
        ++r.ooms;
        break;
      default:
        break;
    }
  }
  std::int64_t at_end = 0;
  for (const auto& seg : s.segments)
    if (seg.device == device) at_end = checked_add(at_end, signed_size(seg.total_size));
  r.reserved_at_end = static_cast<std::uint64_t>(at_end);
  const std::int64_t start = checked_add(at_end, -net);
  r.reserved_at_start = start > 0 ? static_cast<std::uint64_t>(start) : 0;
  std::int64_t reserved = static_cast<std::int64_t>(r.reserved_at_start);
  r.peak_reserved = r.reserved_at_start;
  for (const auto& e : trace) {
    if (e.action == torch_action::segment_alloc || e.action == torch_action::segment_map)
      reserved = checked_add(reserved, signed_size(e.size));
    else if (e.action == torch_action::segment_free || e.action == torch_action::segment_unmap)
      reserved = checked_add(reserved, -signed_size(e.size));
    if (reserved > 0)
      r.peak_reserved = std::max(r.peak_reserved, static_cast<std::uint64_t>(reserved));
  }
  return r;
}
}  // namespace

recorded_figures recorded(const torch_snapshot& s, int device,
                          const std::vector<replay_event>& replayed) {
  recorded_figures r = recorded_segments(s, device);
  if (has_device(s, device)) r.peak_requested = peak_requested(replayed);  // as replayed
  return r;
}

recorded_figures recorded(const torch_snapshot& s, int device, const prepared_trace& replayed) {
  recorded_figures r = recorded_segments(s, device);
  if (has_device(s, device)) r.peak_requested = replayed.peak_requested;
  return r;
}

}  // namespace gpu_basics

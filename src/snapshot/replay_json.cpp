// replay's file read back (snapshot/replay_json.hpp): documents that mirror the file's keys, read
// through core/json.hpp (a value that cannot be read is refused naming its key path), then the
// checks that the figures hold together.
#include "gpu_basics/snapshot/replay_json.hpp"

#include <limits>
#include <set>

#include "gpu_basics/core/json.hpp"

namespace gpu_basics {

namespace {

struct recorded_doc {
  std::optional<std::string> alloc_conf;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t peak_requested_bytes = 0;
  std::uint64_t reserved_at_start_bytes = 0;
  std::uint64_t reserved_at_end_bytes = 0;
  std::int64_t backend_allocations = 0;
  std::size_t ooms = 0;
};
void from_json(const nlohmann::json& j, recorded_doc& r) {  // read only: to_json() writes it
  require_json_object(j);
  r = {};
  read_required_member(j, "alloc_conf", r.alloc_conf);
  read_required_member(j, "peak_reserved_bytes", r.peak_reserved_bytes);
  read_required_member(j, "peak_requested_bytes", r.peak_requested_bytes);
  read_required_member(j, "reserved_at_start_bytes", r.reserved_at_start_bytes);
  read_required_member(j, "reserved_at_end_bytes", r.reserved_at_end_bytes);
  read_required_member(j, "backend_allocations", r.backend_allocations);
  read_required_member(j, "ooms", r.ooms);
}

/// A policy: its figures only where its replay finished ("failure" null).
struct policy_doc {
  std::string conf;
  std::optional<std::string> failure;
  std::size_t peak_reserved_bytes = 0;
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::int64_t backend_allocations = 0;
  double fragmentation_at_peak = 0;
  double seconds = 0;
};
void from_json(const nlohmann::json& j, policy_doc& p) {
  require_json_object(j);
  p = {};
  read_required_member(j, "conf", p.conf);
  read_required_member(j, "failure", p.failure);
  if (p.failure) return;
  read_required_member(j, "peak_reserved_bytes", p.peak_reserved_bytes);
  read_required_member(j, "peak_allocated_bytes", p.peak_allocated_bytes);
  read_required_member(j, "peak_requested_bytes", p.peak_requested_bytes);
  read_required_member(j, "backend_allocations", p.backend_allocations);
  read_required_member(j, "fragmentation_at_peak", p.fragmentation_at_peak);
  read_required_member(j, "seconds", p.seconds);
}

struct replay_doc {
  std::string snapshot;
  int device = 0;
  std::size_t trace_events = 0;
  std::size_t replay_events = 0;
  std::size_t rebuilt_blocks = 0;
  std::optional<std::uint64_t> device_memory_bytes;
  recorded_doc recorded;
  std::vector<policy_doc> policies;
  double seconds = 0;
};
void from_json(const nlohmann::json& j, replay_doc& r) {
  require_json_object(j);
  r = {};
  read_required_member(j, "snapshot", r.snapshot);
  read_required_member(j, "device", r.device);
  read_required_member(j, "trace_events", r.trace_events);
  read_required_member(j, "replay_events", r.replay_events);
  read_required_member(j, "rebuilt_blocks", r.rebuilt_blocks);
  read_required_member(j, "device_memory_bytes", r.device_memory_bytes);
  read_required_member(j, "recorded", r.recorded);
  read_required_member(j, "policies", r.policies);
  read_required_member(j, "seconds", r.seconds);
}

[[noreturn]] void refuse(std::string_view path, const std::string& detail) {
  json_path_error e(detail);
  e.prepend_path(path);
  throw e;
}

bool names_bytes(std::string_view key) {
  return key == "bytes" || key.ends_with("_bytes");
}

/// check_saved_byte_sizes() below `j`; `bytes`: `j` is the value of a key that names bytes.
void check_sizes_in(const nlohmann::json& j, bool bytes) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (bytes && j.is_number()) {
    if (j.is_number_unsigned() ? j.get<std::uint64_t>() > kMax
                               : j.is_number_float() && j.get<double>() >= 0x1p63)
      throw json_path_error("expected at most " + std::to_string(kMax) + " bytes, got " +
                            json_kind(j));
    return;
  }
  if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) try {
        check_sizes_in(j[i], bytes);
      } catch (json_path_error& e) {
        e.prepend_index(i);
        throw;
      }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) try {
        check_sizes_in(value, names_bytes(key));
      } catch (json_path_error& e) {
        e.prepend_key(key);
        throw;
      }
  }
}

void check_fraction(std::string_view path, double v) {
  if (!(v >= 0 && v <= 1)) refuse(path, "expected a fraction in 0..1, got " + std::to_string(v));
}

void check_seconds(std::string_view path, double v) {
  if (!(v >= 0)) refuse(path, "expected seconds of 0 or more, got " + std::to_string(v));
}

replay_report replay_from(const replay_doc& x) {
  replay_report r;
  r.file = x.snapshot;
  if (x.device < 0) refuse("device", "expected a device index of 0 or more");
  r.device = x.device;
  r.trace_events = x.trace_events;
  r.replay_events = x.replay_events;
  r.rebuilt = x.rebuilt_blocks;
  r.device_memory = x.device_memory_bytes;
  const recorded_doc& rec = x.recorded;
  r.recorded_conf = rec.alloc_conf;
  r.recorded = {rec.reserved_at_start_bytes,
                rec.reserved_at_end_bytes,
                rec.peak_reserved_bytes,
                rec.peak_requested_bytes,
                rec.backend_allocations,
                x.trace_events,
                rec.ooms};
  if (x.policies.empty() || !x.policies.front().conf.empty())
    refuse("policies", "expected a list that starts with the defaults (conf \"\")");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < x.policies.size(); ++i) {
    const policy_doc& p = x.policies[i];
    const std::string at = "policies[" + std::to_string(i) + "]";
    if (!seen.insert(p.conf).second) refuse(at + ".conf", "a policy listed twice");
    policy_replay out{p.conf, std::nullopt, p.failure.value_or("")};
    if (!p.failure) {
      if (p.peak_allocated_bytes > p.peak_reserved_bytes)
        refuse(at + ".peak_allocated_bytes", "above peak_reserved_bytes");
      if (p.peak_requested_bytes > p.peak_allocated_bytes)
        refuse(at + ".peak_requested_bytes", "above peak_allocated_bytes");
      if (p.backend_allocations < 0) refuse(at + ".backend_allocations", "expected 0 or more");
      check_fraction(at + ".fragmentation_at_peak", p.fragmentation_at_peak);
      check_seconds(at + ".seconds", p.seconds);
      replay_result res;
      res.events = x.replay_events;
      res.peak_reserved = p.peak_reserved_bytes;
      res.peak_allocated = p.peak_allocated_bytes;
      res.peak_requested = p.peak_requested_bytes;
      res.backend_allocations = p.backend_allocations;
      res.fragmentation_at_peak = p.fragmentation_at_peak;
      res.seconds = p.seconds;
      out.result = res;
    }
    r.policies.push_back(std::move(out));
  }
  check_seconds("seconds", x.seconds);
  r.seconds = x.seconds;
  return r;
}

}  // namespace

void check_saved_byte_sizes(const nlohmann::json& j) {
  check_sizes_in(j, false);
}

int saved_schema_version(const nlohmann::json& j, int current) {
  const auto it = j.find("schema_version");
  if (it == j.end()) {
    json_path_error e("missing");
    e.prepend_key("schema_version");
    throw e;
  }
  int version = 0;
  try {
    read_json(*it, version);
  } catch (json_path_error& e) {
    e.prepend_key("schema_version");
    throw;
  }
  if (version < 1 || version > current)
    throw format_error("schema_version " + std::to_string(version) +
                       " is not one this build reads (1 to " + std::to_string(current) + ")" +
                       (version > current ? "; a newer gpu-basics wrote it" : ""));
  return version;
}

replay_report replay_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    if (!j.is_object() || j.value("command", std::string()) != "replay")
      throw format_error("not a replay file (its \"command\" is not \"replay\")");
    if (!j.contains("schema_version"))
      throw format_error(
          "a replay file without a schema_version, from a gpu-basics that replayed "
          "garbage_collection_threshold under a limit PyTorch never sets: run replay again");
    (void)saved_schema_version(j, kReplaySchemaVersion);
    check_saved_byte_sizes(j);
    replay_doc x;
    read_json(j, x);
    return replay_from(x);
  } catch (const json_path_error& e) {
    throw format_error(source +
                       ": not a replay file that can be read: " + message_line(e.what(), 160));
  } catch (const format_error& e) {
    throw format_error(source + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw format_error(source + ": not a replay file that can be read: " +
                       message_line(json_path_error_of(e).what(), 160));
  }
}

}  // namespace gpu_basics

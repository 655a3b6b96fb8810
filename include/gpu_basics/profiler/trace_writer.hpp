// Chrome Trace Event JSON, which Perfetto and chrome://tracing open: complete ("X") slices with
// ts/dur in microseconds on (pid, tid) tracks, flows ("s"/"f"), counters ("C", one series per
// name and process), and metadata ("M") naming processes and threads. Events are kept compact
// and serialized directly (100k events in a few tens of milliseconds); a path ending in ".gz" is
// written gzip-compressed where the build has zlib. Host-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpu_basics {

/// Arguments already serialized as a JSON object ("{...}"), for writers of many events.
struct json_text {
  /// Wraps `t`, which must be a JSON object's text.
  explicit json_text(std::string t) : text(std::move(t)) {}
  std::string text;
};

class trace_writer {
 public:
  /// A slice on track (pid, tid) from ts_us for dur_us.
  void slice(std::string name, std::string category, double ts_us, double dur_us, std::int64_t pid,
             std::int64_t tid, const nlohmann::json& args = nlohmann::json::object());
  /// As slice(), with `args` serialized already (no JSON object built per event).
  void slice_raw(std::string name, std::string category, double ts_us, double dur_us,
                 std::int64_t pid, std::int64_t tid, json_text args);
  /// A flow arrow from the slice enclosing (ts_from, pid_from, tid_from) to the one enclosing
  /// (ts_to, pid_to, tid_to), e.g. a kernel launch to its kernel. `id` must be unique per flow.
  void flow(std::uint64_t id, std::string name, double ts_from_us, std::int64_t pid_from,
            std::int64_t tid_from, double ts_to_us, std::int64_t pid_to, std::int64_t tid_to);
  /// A counter sample: one series per (pid, name). A non-finite sample is written as null.
  void counter(std::string name, double ts_us, std::int64_t pid, double sample);
  /// Names process `pid` in the viewer; a sort_index >= 0 orders it among the processes.
  void name_process(std::int64_t pid, std::string name, int sort_index = -1);
  /// Names thread `tid` of process `pid`; a sort_index >= 0 orders it within the process.
  void name_thread(std::int64_t pid, std::int64_t tid, std::string name, int sort_index = -1);
  /// Key/value pairs written into the trace's top-level "metadata" object.
  void metadata(const std::string& key, nlohmann::json v);

  /// Events added so far (metadata events included).
  [[nodiscard]] std::size_t size() const noexcept { return events_.size(); }
  /// {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}: metadata events first,
  /// the rest sorted by ts (stable).
  [[nodiscard]] std::string to_string() const;
  /// The same document, parsed (for tests and small traces).
  [[nodiscard]] nlohmann::json to_json() const;
  /// Written atomically (results.hpp); a path ending in ".gz" is gzip-compressed.
  /// @throws io_error when the file cannot be written, or for ".gz" in a build without zlib.
  void write(const std::string& path) const;
  /// Whether write() can compress (the build found zlib).
  [[nodiscard]] static bool gzip_supported() noexcept;

 private:
  void name_track(const char* what, std::int64_t pid, std::optional<std::int64_t> tid,
                  std::string name, int sort_index);
  struct event {
    char ph = 'X';
    char flow_end = 0;  // 'e' on a flow's end ("bp": "e")
    double ts = 0, dur = 0;
    std::int64_t pid = 0, tid = 0;
    std::uint64_t id = 0;
    bool has_tid = true;
    std::string name, cat, args;  // args: a JSON object's text, or empty
  };
  std::vector<event> events_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

/// Appends s to out as a JSON string (quoted, escaped).
void append_json_string(std::string& out, std::string_view s);

}  // namespace gpu_basics

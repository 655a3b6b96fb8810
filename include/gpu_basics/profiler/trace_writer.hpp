// Chrome Trace Event JSON, which Perfetto and chrome://tracing open: complete ("X") slices with
// ts/dur in microseconds on (pid, tid) tracks, counters ("C"), and metadata ("M") naming
// processes and threads. Host-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpu_basics {

class trace_writer {
 public:
  /// A slice on track (pid, tid) from ts_us for dur_us.
  void slice(std::string name, std::string category, double ts_us, double dur_us, std::int64_t pid,
             std::int64_t tid, nlohmann::json args = nlohmann::json::object());
  /// A flow arrow from the slice enclosing (ts_from, pid_from, tid_from) to the one enclosing
  /// (ts_to, pid_to, tid_to), e.g. a kernel launch to its kernel. `id` must be unique per flow.
  void flow(std::uint64_t id, std::string name, double ts_from_us, std::int64_t pid_from, std::int64_t tid_from,
            double ts_to_us, std::int64_t pid_to, std::int64_t tid_to);
  /// A counter sample: one series per (pid, name).
  void counter(std::string name, double ts_us, std::int64_t pid, double sample);
  void name_process(std::int64_t pid, std::string name, int sort_index = -1);
  void name_thread(std::int64_t pid, std::int64_t tid, std::string name, int sort_index = -1);
  /// Key/value pairs written into the trace's top-level "metadata" object.
  void metadata(const std::string& key, nlohmann::json v);

  [[nodiscard]] std::size_t size() const noexcept { return events_.size(); }
  /// {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}; slices sorted by ts.
  [[nodiscard]] nlohmann::json to_json() const;
  /// Written atomically (results.hpp); throws io_error.
  void write(const std::string& path) const;

 private:
  std::vector<nlohmann::json> events_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

}  // namespace gpu_basics

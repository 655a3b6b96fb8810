#include "gpu_basics/profiler/trace_writer.hpp"

#include <algorithm>

#include "gpu_basics/core/results.hpp"

namespace gpu_basics {

void trace_writer::slice(std::string name, std::string category, double ts_us, double dur_us,
                         std::int64_t pid, std::int64_t tid, nlohmann::json args) {
  events_.push_back({{"name", std::move(name)}, {"cat", std::move(category)}, {"ph", "X"},
                     {"ts", ts_us}, {"dur", std::max(0.0, dur_us)}, {"pid", pid}, {"tid", tid},
                     {"args", std::move(args)}});
}

void trace_writer::flow(std::uint64_t id, std::string name, double ts_from_us, std::int64_t pid_from,
                        std::int64_t tid_from, double ts_to_us, std::int64_t pid_to, std::int64_t tid_to) {
  events_.push_back({{"name", name}, {"cat", "flow"}, {"ph", "s"}, {"id", id}, {"ts", ts_from_us},
                     {"pid", pid_from}, {"tid", tid_from}});
  events_.push_back({{"name", std::move(name)}, {"cat", "flow"}, {"ph", "f"}, {"bp", "e"}, {"id", id},
                     {"ts", ts_to_us}, {"pid", pid_to}, {"tid", tid_to}});
}

void trace_writer::counter(std::string name, double ts_us, std::int64_t pid, double sample) {
  nlohmann::json args;
  args[name] = sample;
  events_.push_back({{"name", std::move(name)}, {"ph", "C"}, {"ts", ts_us}, {"pid", pid}, {"args", args}});
}

void trace_writer::name_process(std::int64_t pid, std::string name, int sort_index) {
  events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", std::move(name)}}}});
  if (sort_index >= 0)
    events_.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid},
                       {"args", {{"sort_index", sort_index}}}});
}

void trace_writer::name_thread(std::int64_t pid, std::int64_t tid, std::string name, int sort_index) {
  events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                     {"args", {{"name", std::move(name)}}}});
  if (sort_index >= 0)
    events_.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                       {"args", {{"sort_index", sort_index}}}});
}

void trace_writer::metadata(const std::string& key, nlohmann::json v) { metadata_[key] = std::move(v); }

nlohmann::json trace_writer::to_json() const {
  std::vector<nlohmann::json> sorted = events_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    const bool ma = a["ph"] == "M", mb = b["ph"] == "M";
    if (ma != mb) return ma;  // metadata first
    if (ma) return false;
    return a["ts"].get<double>() < b["ts"].get<double>();
  });
  return {{"traceEvents", sorted}, {"displayTimeUnit", "ms"}, {"metadata", metadata_}};
}

void trace_writer::write(const std::string& path) const { write_file_atomically(path, to_json().dump() + "\n"); }

}  // namespace gpu_basics

#include "gpu_basics/lessons/schema_v1.hpp"

#include <array>
#include <cmath>
#include <regex>
#include <string_view>
#include <utility>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics::lessons::schema_v1 {

std::uint64_t bytes_from_text(const std::string& text) {
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw format_error("'" + text + "' is not a size such as \"512 B\" or \"1.5 GiB\"");
  static constexpr std::array<std::string_view, 5> units = {"B", "KiB", "MiB", "GiB", "TiB"};
  int power = 0;
  while (units[static_cast<std::size_t>(power)] != m[2].str()) ++power;
  const double bytes = std::round(std::stod(m[1].str()) * std::ldexp(1.0, 10 * power));
  if (!(bytes < 0x1p64)) throw format_error("'" + text + "' is too large a size");
  return static_cast<std::uint64_t>(bytes);
}

trace_summary trace_from_v1(const nlohmann::json& table, const nlohmann::json* extra_trace) {
  trace_summary s;
  const std::string title = table.value("title", std::string());
  const std::string prefix = "Trace written to ";
  if (title.rfind(prefix, 0) == 0) s.path = title.substr(prefix.size());
  const std::pair<const char*, std::int64_t trace_summary::*> rows[] = {
      {"kernels", &trace_summary::kernels},
      {"memory copies", &trace_summary::memcpys},
      {"memsets", &trace_summary::memsets},
      {"CUDA runtime API calls", &trace_summary::api_calls},
      {"synchronizations (CPU waiting for the GPU)", &trace_summary::syncs},
      {"user ranges (scoped_range / NVTX)", &trace_summary::ranges},
      {"launch -> GPU flow arrows", &trace_summary::flows},
      {"NVML counter samples", &trace_summary::nvml_counter_events},
      {"allocator counter samples", &trace_summary::allocator_counter_events},
      {"records dropped by CUPTI", &trace_summary::dropped_records},
      {"trace events written", &trace_summary::events}};
  for (const auto& row : table.at("rows")) {
    const std::string what = row.at("what").get<std::string>();
    for (const auto& [name, member] : rows)
      if (what == name) s.*member = row.at("count").get<std::int64_t>();
  }
  // The notes: "- Source: <source>. <n> events written in <t> ms. ... GPU <d> holds a track per
  // stream ..." and, for a schedule, "the first <w> step(s) untraced ... the next <u> traced".
  static const std::regex source_re(R"(^- Source: (.*)\. \d+ events written in ([0-9.]+) ms)");
  static const std::regex device_re(R"(GPU ([0-9]+) holds a track per stream)");
  static const std::regex schedule_re(
      R"(the first ([0-9]+) step\(s\) untraced .*the next ([0-9]+) traced)");
  for (const auto& n : table.value("notes", nlohmann::json::array())) {
    if (!n.is_string()) continue;
    const std::string text = n.get<std::string>();
    std::smatch m;
    if (std::regex_search(text, m, source_re)) {
      s.source = m[1].str();
      s.write_s = std::stod(m[2].str()) * 1e-3;
    }
    if (std::regex_search(text, m, device_re)) s.device = std::stoi(m[1].str());
    if (std::regex_search(text, m, schedule_re)) {
      s.schedule_wait = std::stoi(m[1].str());
      s.schedule_warmup = std::stoi(m[2].str());
    }
  }
  if (extra_trace && extra_trace->is_object()) {
    s.path = extra_trace->value("path", s.path);
    s.source = extra_trace->value("source", s.source);
    s.write_s = extra_trace->value("write_s", s.write_s);
    s.events = extra_trace->value("events", s.events);
  }
  return s;
}

}  // namespace gpu_basics::lessons::schema_v1

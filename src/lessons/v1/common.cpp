#include "common.hpp"

#include <regex>
#include <utility>

namespace gpu_basics::lessons::v1 {

namespace {
std::string key_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? json_path_error::key_text(key)
                        : parent + "." + json_path_error::key_text(key);
}
}  // namespace

std::optional<node> node::find(const std::string& key) const {
  if (!value_->is_object()) return std::nullopt;
  const auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return node(*it, key_path(path_, key));
}

node node::at(const std::string& key) const {
  if (!value_->is_object()) throw error("expected an object, got " + json_kind(*value_));
  const auto it = value_->find(key);
  if (it == value_->end()) throw node(*value_, key_path(path_, key)).error("missing");
  return node(*it, key_path(path_, key));
}

node node::at(std::size_t i) const {
  if (!value_->is_array()) throw error("expected a list, got " + json_kind(*value_));
  const std::string path = path_ + "[" + std::to_string(i) + "]";
  if (i >= value_->size())
    throw node(*value_, path).error("missing (the list has " + std::to_string(size()) + ")");
  return node((*value_)[i], path);
}

json_path_error node::error(const std::string& detail) const {
  json_path_error e(detail);
  e.prepend_path(path_);
  return e;
}

std::vector<std::pair<std::string, node>> node::items() const {
  if (!value_->is_object()) throw error("expected an object, got " + json_kind(*value_));
  std::vector<std::pair<std::string, node>> out;
  for (const auto& [k, v] : value_->items()) out.emplace_back(k, node(v, key_path(path_, k)));
  return out;
}

node node::iterator::operator*() const {
  return node(list_->raw()[i_], list_->path() + "[" + std::to_string(i_) + "]");
}

node::iterator node::begin() const {
  if (!value_->is_array()) throw error("expected a list, got " + json_kind(*value_));
  return {this, 0};
}

std::uint64_t bytes_of(const node& cell) {
  if (cell.raw().is_number_integer()) return cell.get<std::uint64_t>();
  if (!cell.is_string()) throw cell.error("expected a size, got " + json_kind(cell.raw()));
  return bytes_in(cell, cell.raw().get_ref<const std::string&>());
}

std::uint64_t bytes_in(const node& where, const std::string& text) {
  try {
    return schema_v1::bytes_from_text(text);
  } catch (const format_error& e) {
    throw where.error(e.what());
  }
}

std::optional<node> table_of(const node& block, const char* id) {
  const node tables = block.at("tables");
  if (!tables.is_object()) throw tables.error("expected an object, got " + json_kind(tables.raw()));
  return tables.find(id);
}

std::optional<node> extra_entry(const node& block, const char* key) {
  const auto extra = block.find("extra");
  if (!extra) return std::nullopt;
  const auto e = extra->find(key);
  if (!e || e->is_null()) return std::nullopt;
  return e;
}

node extra_of(const node& block) {
  static const json kEmpty = json::object();
  if (auto e = block.find("extra")) return *e;
  return node(kEmpty, block.path().empty() ? "extra" : block.path() + ".extra");
}

std::string title_of(const node& t) {
  return t.value("title", std::string());
}

std::vector<std::string> notes_of(const node& t) {
  std::vector<std::string> out;
  const auto notes = t.find("notes");
  if (!notes || !notes->is_array()) return out;
  for (const auto& n : notes->raw())
    if (n.is_string()) out.push_back(n.get<std::string>());
  return out;
}

node rows_of(const node& t) {
  node rows = t.at("rows");
  if (!rows.is_array()) throw rows.error("expected a list, got " + json_kind(rows.raw()));
  return rows;
}

std::optional<double> nullable_number(const node& row, const char* key) {
  return row.at(key).get<std::optional<double>>();
}

std::optional<double> number_if_any(const node& row, const char* key) {
  const auto v = row.find(key);
  if (!v) return std::nullopt;
  return v->get<std::optional<double>>();
}

trace_summary trace_from_v1(const node& table, const std::optional<node>& extra_trace) {
  trace_summary s;
  const std::string title = title_of(table);
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
  const auto notes = table.find("notes");
  for (const auto& text : notes_of(table)) {
    std::smatch m;
    if (std::regex_search(text, m, source_re)) {
      s.source = m[1].str();
      s.write_s = number_in<double>(*notes, m[2].str()) * 1e-3;
    }
    if (std::regex_search(text, m, device_re)) s.device = number_in<int>(*notes, m[1].str());
    if (std::regex_search(text, m, schedule_re)) {
      s.schedule_wait = number_in<int>(*notes, m[1].str());
      s.schedule_warmup = number_in<int>(*notes, m[2].str());
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

}  // namespace gpu_basics::lessons::v1

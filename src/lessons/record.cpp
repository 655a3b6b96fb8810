#include "gpu_basics/lessons/record.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/input_file.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "json_text.hpp"

namespace gpu_basics::lessons {

namespace {

const lesson& lesson_named(const std::string& name, const std::string& source) {
  const lesson* l = find_lesson(name);
  if (!l) throw format_error(source + ": unknown lesson '" + name + "'");
  return *l;
}

/// The key path in a schema-1 file of `path` in a lesson's block (upgrade_v1): "tables.<id>..."
/// is the file's "tables[i]..." (`tables`: id -> i), "extra..." the lesson's own key under `all`
/// (`extra_key`), or the top level's for one lesson (`extra_key` empty).
std::string path_in_file(const std::string& path, const std::map<std::string, std::size_t>& tables,
                         const std::string& extra_key) {
  const auto follows = [&](const std::string& prefix) {
    return path.starts_with(prefix) && (path.size() == prefix.size() ||
                                        path[prefix.size()] == '.' || path[prefix.size()] == '[');
  };
  std::size_t best = 0;
  std::string file;
  for (const auto& [id, i] : tables) {
    const std::string prefix = "tables." + json_path_error::key_text(id);
    if (prefix.size() > best && follows(prefix)) {
      best = prefix.size();
      file = "tables[" + std::to_string(i) + "]";
    }
  }
  if (best > 0) return file + path.substr(best);
  if (follows("extra")) {
    std::string rest = path.substr(5);
    if (!extra_key.empty()) return json_path_error::key_text(extra_key) + rest;
    return rest.empty() ? rest : rest.substr(rest.front() == '.' ? 1 : 0);
  }
  return path;
}

/// Schema 1 kept, per lesson, tables (ids prefixed "<lesson>." under `all`) and the lesson's
/// extra keys (top level for one lesson, under "<lesson>" for `all`). Gathers them per lesson
/// and lets each lesson rebuild its result.
std::vector<std::pair<std::string, nlohmann::json>> upgrade_v1(const nlohmann::json& j,
                                                               const std::string& command,
                                                               const std::string& source) {
  static const std::vector<std::string> kTopLevel = {"schema_version", "command", "environment",
                                                     "tables", "errors"};
  std::vector<std::pair<std::string, nlohmann::json>> blocks;
  std::map<std::string, std::map<std::string, std::size_t>> table_index;  // lesson, id -> tables[i]
  const auto block_for = [&](const std::string& name) -> nlohmann::json& {
    for (auto& [n, b] : blocks)
      if (n == name) return b;
    blocks.emplace_back(name, nlohmann::json{{"tables", nlohmann::json::object()},
                                             {"extra", nlohmann::json::object()}});
    return blocks.back().second;
  };
  if (command == "all") {
    for (const auto& l : registry())
      if (j.contains(std::string(l.name)) || l.name == "info") (void)block_for(std::string(l.name));
  } else {
    (void)block_for(command);
  }
  const auto& tables = j.at("tables");
  if (!tables.is_array()) throw format_error(source + ": \"tables\" is not a list");
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const auto& t = tables[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_string())
      throw format_error(source + ": tables[" + std::to_string(i) + "]: a table without an \"id\"");
    std::string id = t["id"].get<std::string>();
    std::string owner = command;
    if (command == "all") {
      const auto dot = id.find('.');
      if (dot == std::string::npos)
        throw format_error(source + ": table '" + id + "' names no lesson");
      owner = id.substr(0, dot);
      id = id.substr(dot + 1);
    }
    (void)lesson_named(owner, source);
    block_for(owner)["tables"][id] = t;
    table_index[owner][id] = i;
  }
  for (auto& [name, block] : blocks) {
    if (command == "all") {
      if (j.contains(name) && j[name].is_object()) block["extra"] = j[name];
    } else {
      for (const auto& [k, v] : j.items())
        if (std::find(kTopLevel.begin(), kTopLevel.end(), k) == kTopLevel.end())
          block["extra"][k] = v;
    }
  }
  // A lesson that failed under `all` left no tables: it has no result.
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (auto& [name, block] : blocks) {
    if (block["tables"].empty()) continue;
    const lesson& l = lesson_named(name, source);
    try {
      out.emplace_back(name, l.upgrade_v1(block));
    } catch (const json_path_error& e) {
      const std::string at =
          path_in_file(e.path(), table_index[name], command == "all" ? name : "");
      throw format_error(source + ": " + (at.empty() ? "" : at + ": ") + e.detail());
    } catch (const format_error& e) {
      throw format_error(source + ": the " + name +
                         " tables of schema 1 cannot be read: " + e.what());
    }
  }
  return out;
}

}  // namespace

std::vector<presentation::report> render(const run_record& r) {
  const device_facts facts = facts_of(r);
  std::vector<presentation::report> out;
  const std::string source = r.source.empty() ? "results" : r.source;
  for (const auto& [name, result] : r.results) {
    const lesson& l = lesson_named(name, source);
    try {
      out.push_back(l.render(result, facts));
    } catch (const json_path_error& e) {  // the path from the results on: the file is added
      throw format_error(source + ": " + e.what());
    } catch (const format_error& e) {  // the lesson's reader knows the result, not the file
      throw format_error(source + ": results." + name + ": " + e.what());
    }
  }
  return out;
}

device_facts facts_of(const run_record& r) {
  const auto& env = r.environment;
  const std::string source = r.source.empty() ? "the results" : r.source;
  constexpr std::uint64_t kMaxDevice = std::numeric_limits<int>::max();
  int device = 0;
  if (env.contains("config") && env["config"].is_object() && env["config"].contains("device")) {
    const auto& d = env["config"]["device"];
    if (!d.is_number_integer() ||
        (d.is_number_unsigned() ? d.get<std::uint64_t>() > kMaxDevice : d.get<std::int64_t>() < 0))
      throw format_error(source +
                         ": environment.config.device: expected a device index (an integer in 0.." +
                         std::to_string(kMaxDevice) + "), got " + message_line(d.dump(), 48));
    device = d.get<int>();
  }
  std::string nvml_status = "ok";
  if (env.contains("nvml") && env["nvml"].is_string()) nvml_status = env["nvml"].get<std::string>();
  if (!env.contains("gpus") || !env["gpus"].is_array())
    throw format_error(source + ": names no GPU (environment.gpus is missing)");
  std::size_t i = 0;
  for (const auto& g : env["gpus"]) {
    device_info d;
    try {
      read_json(g, d);
    } catch (json_path_error& e) {
      e.prepend_index(i);
      e.prepend_path("environment.gpus");
      throw format_error(source + ": " + e.what());
    }
    if (d.index == device) return device_facts::of(d, nvml_status);
    ++i;
  }
  throw format_error(source + ": names no GPU " + std::to_string(device) + " in environment.gpus");
}

nlohmann::json to_json(const run_record& r, const std::vector<presentation::report>& rendered) {
  nlohmann::json results = nlohmann::json::object();
  for (const auto& [name, result] : r.results) results[name] = result;
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& rep : rendered)
    for (const auto& t : rep.tables) {
      nlohmann::json jt = presentation::to_json(t);
      if (r.command == "all") jt["id"] = rep.lesson + "." + t.id;
      tables.push_back(std::move(jt));
    }
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [name, why] : r.errors) errors[name] = why;
  return {{"schema_version", kSchemaVersion},
          {"command", r.command},
          {"environment", r.environment},
          {"results", results},
          {"errors", errors},
          {"tables", tables}};
}

run_record parse_record(nlohmann::json j, const std::string& source) {
  if (!j.is_object() || !j.contains("schema_version") || !j.contains("command"))
    throw format_error(source + ": not a gpu-basics results file (no schema_version and command)");
  if (!j["schema_version"].is_number_integer() || !j["command"].is_string())
    throw format_error(source + ": schema_version must be an integer and command a string");
  const auto& version = j["schema_version"];
  if (version.is_number_unsigned() ? version.get<std::uint64_t>() > kSchemaVersion
                                   : version.get<std::int64_t>() < 1)
    throw format_error(source + ": schema_version " + version.dump() +
                       " is not one this build reads (1 or " + std::to_string(kSchemaVersion) +
                       ")" + (version.is_number_unsigned() ? "; a newer gpu-basics wrote it" : ""));
  run_record r;
  r.schema_version = version.get<int>();
  r.command = j["command"].get<std::string>();
  if (r.command != "all") (void)lesson_named(r.command, source);
  if (const auto it = j.find("environment"); it != j.end())
    r.environment = std::move(*it);
  else
    r.environment = nlohmann::json::object();
  if (const auto it = j.find("errors"); it != j.end() && it->is_object())
    for (const auto& [name, why] : it->items())
      r.errors.emplace_back(name, why.is_string() ? why.get<std::string>() : why.dump());
  switch (r.schema_version) {
    case 1:
      if (!j.contains("tables")) throw format_error(source + ": schema 1 without \"tables\"");
      r.results = upgrade_v1(j, r.command, source);
      break;
    case kSchemaVersion: {
      const auto it = j.find("results");
      if (it == j.end() || !it->is_object())
        throw format_error(source + ": schema 2 without a \"results\" object");
      for (const auto& [name, v] : it->items()) (void)lesson_named(name, source);
      for (const auto& l : registry())  // run order, whatever order the file keeps
        if (const auto found = it->find(std::string(l.name)); found != it->end())
          r.results.emplace_back(std::string(l.name), std::move(*found));
      break;
    }
    default:
      throw format_error(source + ": schema_version " + std::to_string(r.schema_version) +
                         " is not one this build reads (1 or " + std::to_string(kSchemaVersion) +
                         "); a newer gpu-basics wrote it");
  }
  return r;
}

nlohmann::json parse_results_json(const std::string& text, const std::string& source) {
  return detail::parse_json_text(text, source, {kMaxResultsDepth, kMaxResultsString});
}

run_record load_record(const std::string& path) {
  const std::string text =
      read_input_file(path, input_size_cap(kMaxResultsFileBytes), "results file");
  run_record r = parse_record(parse_results_json(text, path), path);
  r.source = path;
  return r;
}

}  // namespace gpu_basics::lessons

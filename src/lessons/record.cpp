#include "gpu_basics/lessons/record.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/input_file.hpp"
#include "gpu_basics/lessons/registry.hpp"

namespace gpu_basics::lessons {

namespace {

const lesson& lesson_named(const std::string& name, const std::string& source) {
  const lesson* l = find_lesson(name);
  if (!l) throw format_error(source + ": unknown lesson '" + name + "'");
  return *l;
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
  for (const auto& t : tables) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_string())
      throw format_error(source + ": a table without an \"id\"");
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
    } catch (const nlohmann::json::exception& e) {
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
  const std::string source = "results";
  for (const auto& [name, result] : r.results)
    out.push_back(lesson_named(name, source).render(result, facts));
  return out;
}

device_facts facts_of(const run_record& r) {
  const auto& env = r.environment;
  int device = 0;
  if (env.contains("config") && env["config"].is_object() && env["config"].contains("device") &&
      env["config"]["device"].is_number_integer())
    device = env["config"]["device"].get<int>();
  std::string nvml_status = "ok";
  if (env.contains("nvml") && env["nvml"].is_string()) nvml_status = env["nvml"].get<std::string>();
  if (!env.contains("gpus") || !env["gpus"].is_array())
    throw format_error("the results name no GPU (environment.gpus is missing)");
  for (const auto& g : env["gpus"]) {
    device_info d;
    try {
      d = g.get<device_info>();
    } catch (const nlohmann::json::exception& e) {
      throw format_error(std::string("environment.gpus holds an unreadable GPU: ") + e.what());
    }
    if (d.index == device) return device_facts::of(d, nvml_status);
  }
  throw format_error("the results name no GPU " + std::to_string(device) + " in environment.gpus");
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

run_record parse_record(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object() || !j.contains("schema_version") || !j.contains("command"))
    throw format_error(source + ": not a gpu-basics results file (no schema_version and command)");
  if (!j["schema_version"].is_number_integer() || !j["command"].is_string())
    throw format_error(source + ": schema_version must be an integer and command a string");
  run_record r;
  r.schema_version = j["schema_version"].get<int>();
  r.command = j["command"].get<std::string>();
  if (r.command != "all") (void)lesson_named(r.command, source);
  r.environment = j.value("environment", nlohmann::json::object());
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
      for (const auto& l : registry())  // run order, whatever order the file keeps
        if (it->contains(std::string(l.name)))
          r.results.emplace_back(std::string(l.name), (*it)[std::string(l.name)]);
      for (const auto& [name, v] : it->items()) (void)lesson_named(name, source);
      break;
    }
    default:
      throw format_error(source + ": schema_version " + std::to_string(r.schema_version) +
                         " is not one this build reads (1 or " + std::to_string(kSchemaVersion) +
                         "); a newer gpu-basics wrote it");
  }
  return r;
}

run_record load_record(const std::string& path) {
  const std::string text =
      read_input_file(path, input_size_cap(kMaxResultsFileBytes), "results file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw format_error(printable(path) + ": not JSON (" + std::string(e.what()) + ")");
  }
  return parse_record(j, path);
}

}  // namespace gpu_basics::lessons

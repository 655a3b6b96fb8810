#include "common.hpp"

namespace gpu_basics::lessons::v1 {

std::uint64_t bytes_of(const json& cell) {
  if (cell.is_number_unsigned() || cell.is_number_integer()) return cell.get<std::uint64_t>();
  return schema_v1::bytes_from_text(cell.get<std::string>());
}

const json* table_of(const json& block, const char* id) {
  const auto& tables = block.at("tables");
  const auto it = tables.find(id);
  return it == tables.end() ? nullptr : &*it;
}

const json* extra_entry(const json& block, const char* key) {
  const auto it = block.find("extra");
  if (it == block.end() || !it->is_object()) return nullptr;
  const auto e = it->find(key);
  return e == it->end() || e->is_null() ? nullptr : &*e;
}

json extra_of(const json& block) {
  return block.contains("extra") ? block.at("extra") : json::object();
}

const json* member_of(const json& object, const char* key) {
  return object.contains(key) ? &object.at(key) : nullptr;
}

std::string title_of(const json& t) {
  return t.value("title", std::string());
}

std::vector<std::string> notes_of(const json& t) {
  std::vector<std::string> out;
  for (const auto& n : t.value("notes", json::array()))
    if (n.is_string()) out.push_back(n.get<std::string>());
  return out;
}

std::optional<double> nullable_number(const json& row, const char* key) {
  const auto& v = row.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<double>();
}

std::optional<double> number_if_any(const json& row, const char* key) {
  const auto it = row.find(key);
  if (it == row.end() || it->is_null()) return std::nullopt;
  return it->get<double>();
}

}  // namespace gpu_basics::lessons::v1

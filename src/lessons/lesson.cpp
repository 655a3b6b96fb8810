#include "gpu_basics/lessons/lesson.hpp"

#include <algorithm>

namespace gpu_basics::lessons {

device_facts device_facts::of(const device_info& d, std::string nvml_status) {
  device_facts f;
  f.device = d;
  f.nvml_status = std::move(nvml_status);
  f.link_bytes_per_s = device_link_bytes_per_s(d);
  f.datasheet = find_datasheet(d.name);
  return f;
}

void attach_notes(std::vector<presentation::table>& tables, const std::vector<note>& notes) {
  for (const auto& n : notes) {
    const auto it = std::find_if(tables.begin(), tables.end(),
                                 [&](const presentation::table& t) { return t.id == n.table_id; });
    if (it != tables.end())
      it->notes.push_back(n.text);
    else if (!tables.empty())
      tables.back().notes.push_back(n.text);
  }
}

}  // namespace gpu_basics::lessons

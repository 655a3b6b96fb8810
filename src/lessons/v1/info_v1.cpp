// Reading the info lesson's schema-1 block (extra.gpus, NVML's status from the notes) back into an
// info_result.
#include <string>

#include "common.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

info_result info_from_v1(const nlohmann::json& json_block) {
  const v1::node block(json_block);
  info_result r;
  r.gpus = block.at("extra").at("gpus").get<std::vector<device_info>>();
  // Schema 1 kept NVML's status in the environment only; a missing link row says the same.
  for (const auto& [id, t] : block.at("tables").items())
    for (const auto& s : v1::notes_of(t)) {
      const auto at = s.find(": link, clock and power rows are n/a.");
      if (at != std::string::npos && s.size() > 2) r.nvml_status = s.substr(2, at - 2);
    }
  return r;
}

}  // namespace gpu_basics::lessons

// libFuzzer harness for the files advise and replay write: the bytes as a file read the way show
// and report read one (read_input_file within kMaxSnapshotJsonBytes, parse_results_json), then,
// by its "command", read back (advice_from_json / replay_from_json), printed as show prints it,
// written as JSON again and drawn as report draws it. The only exception allowed out is
// format_error (bad input, exit 2); any other, a sanitizer report, a run over the time limit or
// memory over the RSS limit is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/input_file.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/report/advice.hpp"
#include "gpu_basics/report/replay.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/replay_json.hpp"
#include "scratch_file.hpp"

namespace {
void read_back(const std::string& path) {
  namespace gb = gpu_basics;
  const std::string text = gb::read_input_file(path, gb::kMaxSnapshotJsonBytes, "saved advice");
  const nlohmann::json j = gb::lessons::parse_results_json(text, path);
  const auto command = j.is_object() && j.contains("command") && j["command"].is_string()
                           ? j["command"].get<std::string>()
                           : std::string();
  if (command == "replay") {
    const gb::replay_report r = gb::replay_from_json(j, path);
    (void)gb::presentation::render_text(gb::replay_table(r));
    (void)gb::to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)gb::report::render_replay_html(r);
  } else {
    const gb::advice a = gb::advice_from_json(j, path);
    for (const auto& t : gb::advice_tables(a)) (void)gb::presentation::render_text(t);
    (void)gb::to_json(a).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)gb::report::render_advice_html(a);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = fuzz::scratch_path("advice");
  if (!fuzz::write_file(path, {reinterpret_cast<const char*>(data), size})) return 0;
  try {
    read_back(path);
  } catch (const gpu_basics::format_error&) {
    // the one expected answer to bad input
  }
  return 0;
}

// libFuzzer harness for comparisons: the bytes cut at each NUL into up to kMaxFiles results files,
// read the way compare reads them (lessons::load_record, an unreadable file being bad input).
// The first two go through compare A B (the comparability checks, the figures matched and judged,
// the table, the JSON and the CSV); all of them through compare --fleet --force (each node's check
// figures, the outliers, the table, the JSON and the CSV). The only exception allowed out of
// either is format_error (bad input, exit 2); any other, a sanitizer report, a run over the time
// limit or memory over the RSS limit is a finding.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/verdict/compare.hpp"
#include "gpu_basics/verdict/fleet.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "scratch_file.hpp"

namespace {

constexpr std::size_t kMaxFiles = 8;

/// The scratch file of node `i`, one set per process, rewritten for every input.
std::string scratch_path(std::size_t i) {
  return fuzz::scratch_path("fleet", ".node" + std::to_string(i) + ".json");
}

/// A results file as compare reads one: unreadable and malformed files are both bad input.
gpu_basics::lessons::run_record load_input(const std::string& path) {
  try {
    return gpu_basics::lessons::load_record(path);
  } catch (const gpu_basics::io_error& e) {
    throw gpu_basics::format_error(e.what());
  }
}

/// compare BASE NEW (--force past the model and driver checks, which are tried first).
void compare_two(const std::string& base_path, const std::string& new_path) {
  namespace verdict = gpu_basics::verdict;
  const auto base = load_input(base_path);
  const auto next = load_input(new_path);
  try {
    verdict::ensure_comparable(base, base_path, next, new_path, false);
  } catch (const gpu_basics::format_error&) {
    // another GPU model or driver: --force goes on (another schema or command does not)
  }
  verdict::ensure_comparable(base, base_path, next, new_path, true);
  for (const double threshold : {0.02, 0.0}) {
    const auto c = verdict::compare(base, next, threshold);
    const auto t = verdict::comparison_table(c, base_path + " against " + new_path);
    (void)gpu_basics::terminal_text(gpu_basics::presentation::render_text(t));
    (void)gpu_basics::presentation::render_csv(t);
    (void)gpu_basics::presentation::render_text(verdict::informational_table(c));
    (void)verdict::to_json(c).dump(2);
  }
}

/// compare --fleet --force FILES...
void compare_fleet(const std::vector<std::string>& paths) {
  namespace verdict = gpu_basics::verdict;
  const auto thresholds = gpu_basics::lessons::thresholds_of(gpu_basics::config{});
  std::vector<verdict::fleet_node> nodes;
  for (const auto& path : paths)
    nodes.push_back({std::filesystem::path(path).stem().string(),
                     verdict::check_of(load_input(path), thresholds)});
  const auto f = verdict::analyze_fleet(nodes);
  const auto t = verdict::fleet_table(f);
  (void)gpu_basics::terminal_text(gpu_basics::presentation::render_text(t));
  (void)gpu_basics::presentation::render_csv(t);
  (void)verdict::to_json(f).dump(2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> paths;
  while (paths.size() < kMaxFiles) {
    const std::size_t cut = paths.size() + 1 == kMaxFiles ? rest.npos : rest.find('\0');
    const std::string path = scratch_path(paths.size());
    if (!fuzz::write_file(path, rest.substr(0, cut))) return 0;
    paths.push_back(path);
    if (cut == rest.npos) break;
    rest.remove_prefix(cut + 1);
  }
  if (paths.size() >= 2) {
    try {
      compare_two(paths[0], paths[1]);
    } catch (const gpu_basics::format_error&) {
      // the one expected answer to bad input
    }
  }
  try {
    compare_fleet(paths);
  } catch (const gpu_basics::format_error&) {
    // the one expected answer to bad input
  }
  return 0;
}

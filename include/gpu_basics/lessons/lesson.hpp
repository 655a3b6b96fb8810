// A lesson is data first. Each one is three steps, registered once (registry.hpp):
//   measure(context) -> result            all GPU work, inside the library, no printing
//   explain(result, device_facts) -> notes  pure: every number it states comes from the result or
//                                            from a named datasheet constant
//   present(result) -> tables              pure
// A result serializes to JSON and back without loss, so everything after `measure` (show, report,
// compare, check) runs on any machine from a saved file.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/core/results.hpp"

namespace gpu_basics {
class nvml;
}

namespace gpu_basics::lessons {

/// Reports how far a long measurement is: the item just done, how many are done, of how many.
using progress_fn = std::function<void(const std::string& item, int done, int total)>;

/// What measure() receives: the validated configuration, the GPUs and, where NVML loaded, NVML.
struct context {
  config cfg;
  std::shared_ptr<nvml> nv;               // null when NVML is unavailable
  std::string nvml_status = "ok";         // "ok" or why NVML is unavailable
  std::vector<device_info> devices;       // every visible GPU
  std::optional<std::string> trace_path;  // --trace: the lesson writes a trace there
  /// memory --snapshot: the memory lesson writes a PyTorch memory snapshot of its peak pass there
  std::optional<std::string> snapshot_path;
  /// The gpu-basics executable, for a lesson that measures in a fresh child process of it (the
  /// unified lesson's ledger); unset: such a part says it could not run.
  std::optional<std::string> self_exe;
  bool charts = false;   // an HTML report will be drawn: parts set to "auto" (the sweep) run
  progress_fn progress;  // may be empty

  /// The device the configuration selects.
  /// @throws std::out_of_range when cfg.device is not in `devices`.
  [[nodiscard]] const device_info& device() const {
    return devices.at(static_cast<std::size_t>(cfg.device));
  }
  /// Calls `progress` when one is set.
  void report_progress(const std::string& item, int done, int total) const {
    if (progress) progress(item, done, total);
  }
};

/// What explain() may use besides the result: the measured GPU as saved with the run, and the
/// ceilings derived from it (PCIe link rate, datasheet).
struct device_facts {
  device_info device;
  std::string nvml_status = "ok";
  std::optional<double> link_bytes_per_s;  // theoretical, per direction (max generation/width)
  std::optional<gpu_datasheet> datasheet;  // when the GPU is a known one

  /// Facts of `d`: its link rate and datasheet looked up.
  [[nodiscard]] static device_facts of(const device_info& d, std::string nvml_status);
};

/// One sentence under a table; `table_id` names the table it explains.
struct note {
  std::string table_id;
  std::string text;
};

/// A lesson as the registry holds it. `measure` returns the lesson's typed result as JSON;
/// `render` reads it back, explains and presents it. Both JSON forms are the lesson's own.
struct lesson {
  std::string_view name;         // the subcommand: "memory"
  std::string_view description;  // one line for --help
  bool traces = false;           // accepts --trace
  bool in_all = true;            // `all` runs it (check does not: it is its own command)
  bool snapshots = false;        // accepts --snapshot (a PyTorch memory snapshot of its allocator)
  bool judges = false;           // judges the GPU: --strict, --baseline, --from; FAIL sets the exit
  bool writes_files = false;     // writes files of its own under output.directory
  /// Measures on the GPU; null in a host-only build (measuring_registry() in measure.hpp sets it).
  /// @throws gpu_basics::error (cuda_error, out_of_memory, ...).
  nlohmann::json (*measure)(context& ctx) = nullptr;
  /// Tables with their notes from a saved result. @throws format_error on a malformed result.
  presentation::report (*render)(const nlohmann::json& result, const device_facts& facts) = nullptr;
  /// The result rebuilt from a schema-1 file: `block` holds "tables" (id -> table JSON) and
  /// "extra" (the lesson's other data). What schema 1 did not keep stays empty.
  /// @throws format_error when the block cannot be read.
  nlohmann::json (*upgrade_v1)(const nlohmann::json& block) = nullptr;
};

/// Attaches each note to the table it names, in order; notes naming no table go under the last.
void attach_notes(std::vector<presentation::table>& tables, const std::vector<note>& notes);

/// Reads a lesson's typed result from JSON, the lesson's entry of a results file's "results".
/// @throws json_path_error (core/json.hpp) naming the key path of the first value that cannot be
/// read, from the results on: "results.transfer.shapes[0].copies[3].seconds".
template <class Result>
[[nodiscard]] Result result_from_json(const nlohmann::json& j, std::string_view lesson_name) {
  Result r;
  try {
    read_json(j, r);
  } catch (json_path_error& e) {
    e.prepend_key(lesson_name);
    e.prepend_key("results");
    throw;
  }
  return r;
}

/// The registry's render step for a lesson with typed explain/present: JSON -> result -> tables
/// with their notes.
/// @throws format_error when the result cannot be read (result_from_json).
template <class Result, std::vector<note> (*Explain)(const Result&, const device_facts&),
          std::vector<presentation::table> (*Present)(const Result&)>
[[nodiscard]] presentation::report render_typed(const nlohmann::json& j, const device_facts& facts,
                                                std::string_view lesson_name) {
  const Result r = result_from_json<Result>(j, lesson_name);
  presentation::report out;
  out.lesson = std::string(lesson_name);
  out.tables = Present(r);
  attach_notes(out.tables, Explain(r, facts));
  return out;
}

}  // namespace gpu_basics::lessons

// The HTML report: one self-contained file (the charting library, styles and data inlined, no
// network needed) drawn from saved runs. Each chart has its lesson's notes beside it and its
// numbers in tables under it; several runs overlay in the same charts. Host-only: a report is made
// on any machine from results files.
#pragma once

#include <string>
#include <vector>

#include "gpu_basics/lessons/record.hpp"

namespace gpu_basics::report {

/// One run in a report, with the name its series carry in legends.
struct run_input {
  std::string label;
  lessons::run_record record;
};

/// Reads results files (any schema `show` reads) and labels each run with its file name, without
/// directory and ".json"; a repeated name gets " (2)", " (3)", ... appended.
/// @throws io_error when a file cannot be read; format_error when one is not a results file.
[[nodiscard]] std::vector<run_input> load_runs(const std::vector<std::string>& paths);

/// `records` labelled as load_runs() labels them, by their sources (the files they were read
/// from).
[[nodiscard]] std::vector<run_input> label_runs(std::vector<lessons::run_record> records);

/// The label of a run measured live: the host name saved in its environment, or "this run".
[[nodiscard]] std::string live_label(const lessons::run_record& r);

/// The report's HTML. Its charts' configurations are also kept, as JSON, in the element
/// `<script type="application/json" id="gb-charts">`: [{"id", "title", "config"}], page order.
/// @throws logic_error when `runs` is empty; format_error when a result cannot be read.
[[nodiscard]] std::string render_html(const std::vector<run_input>& runs);

}  // namespace gpu_basics::report

// The advice page: `gpu-basics advise SNAPSHOT --html PATH`, or `gpu-basics report ADVICE.json`
// of a saved advice. One self-contained HTML file, drawn as the runs' report is drawn (the same
// charting library, styles and page script): reserved and allocated over the trace for the
// defaults and the recommendation, with the fit limits and the out-of-memory points; the
// stranded bytes at peak by cause; the advice's tables and notes. Host-only.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "gpu_basics/snapshot/advise.hpp"

namespace gpu_basics::report {

/// The page of `a`.
[[nodiscard]] std::string render_advice_html(const advice& a);

/// Whether `j` is a saved advice (its "command" is "advise"), not a run's results.
[[nodiscard]] bool is_advice(const nlohmann::json& j) noexcept;

}  // namespace gpu_basics::report

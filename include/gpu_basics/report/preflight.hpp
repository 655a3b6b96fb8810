// The pre-flight page: `gpu-basics preflight REC1 REC2 [REC3] --batches ... --html PATH`. One
// self-contained HTML file, drawn as the advice page is (the same charting library, styles and
// page script): the predicted peak reserved against the batch for the defaults and the
// recommendation, with the --fit limit and each policy's largest batch marked, then the tables
// the terminal shows. Its points are the report's `curve` (as the JSON writes it): nothing is
// computed in the page. Host-only.
#pragma once

#include <string>

#include "gpu_basics/snapshot/preflight.hpp"

namespace gpu_basics::report {

/// The page of `r` (its chart drawn from r.curve, or from r.predictions where that is empty).
[[nodiscard]] std::string render_preflight_html(const preflight_report& r);

}  // namespace gpu_basics::report

// The replay page: `gpu-basics report REPLAY.json -o PAGE.html` of a saved replay. One
// self-contained HTML file, drawn as the advice page is (the same charting library, styles and page
// script): each policy's peak reserved and allocated as bars against the peak PyTorch recorded,
// with the replay's table and notes under it. Host-only.
#pragma once

#include <string>

#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics::report {

/// The page of `r`.
[[nodiscard]] std::string render_replay_html(const replay_report& r);

}  // namespace gpu_basics::report

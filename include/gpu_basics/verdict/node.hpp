// A node's acceptance figures from any saved run: a `check` run as it is, or an `all` run (or a
// transfer / profile run) read through the lessons that measured the same things. So a check can
// be judged again with other thresholds, and a fleet can mix both kinds of file. Host-only.
#pragma once

#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/record.hpp"

namespace gpu_basics::verdict {

/// The check's figures of `r`, judged against `t` (items filled). From an `all` run: the link
/// from its GPU, pinned H2D/D2H of the largest tensor, the streams table's bidirectional copy,
/// the largest D2D copy, the largest bf16 GEMM, and a "verification failed" error under `all`
/// as a failed verification; NVML's health readings are "not measured".
/// @throws format_error when `r` holds no figure a check reads, or a result cannot be read.
[[nodiscard]] lessons::check_result check_of(const lessons::run_record& r,
                                             const lessons::check_thresholds& t);

}  // namespace gpu_basics::verdict

// The CLI's verdict commands: `check`'s exit code, its baseline and --from, and `compare` (two
// runs, or a fleet). The logic lives in the library (lessons/check.hpp, verdict/); this is the
// loading, printing and exit codes around it.
#pragma once

#include <iosfwd>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/lessons/record.hpp"

namespace gpu_basics::cli {

/// `compare`: two runs or a fleet. Returns the exit code; never throws.
int run_compare(const options& o, std::ostream& out, std::ostream& err);

/// check --baseline: the baseline, read and checked to be a check result; nullopt without one.
/// @throws format_error (also for a file that cannot be read: bad input, exit 2).
[[nodiscard]] std::optional<lessons::run_record> load_baseline(const options& o);

/// Adds the comparison with `baseline` to a check result (JSON) as items: a worse figure WARNs,
/// the same or better PASS. `live` holds the run's environment.
/// @throws format_error when the runs should not be compared (ensure_comparable).
void add_baseline(nlohmann::json& check_result, const lessons::run_record& live,
                  const lessons::run_record& baseline, const options& o);

/// 0 when no check failed (and, with `strict`, none warned), else exit_check_failed; says why
/// on `err` in one line.
[[nodiscard]] int check_exit_code(const lessons::run_record& rec, bool strict, std::ostream& err);

/// check --from FILE: the saved run judged against cfg's thresholds, printed and written like a
/// live check. Returns the exit code.
/// @throws format_error for a file that is not a usable run; io_error writing outputs.
int judge_saved(const options& o, const config& cfg,
                const std::optional<lessons::run_record>& baseline, std::ostream& out,
                std::ostream& err);

}  // namespace gpu_basics::cli

// `gpu-basics check`: node acceptance. A few pinned copies, one D2D copy and one bf16 GEMM,
// every one verified, plus NVML's link, ECC, row-remapping and idle throttle readings; each check
// then gets PASS, WARN, FAIL (or SKIP, with the reason as its hint: not read by this run, the GPU
// or driver cannot say, ...) against the check.* thresholds, with the measured value, the
// threshold and a one-line hint. The D2D figure is read + write (units.hpp). The verdict logic is
// pure (evaluate_check) so it is tested on the CPU from saved runs; measure_check is the GPU part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/transfer.hpp"

namespace gpu_basics::lessons {

/// The thresholds a check was judged by (config::check_section's fractions).
struct check_thresholds {
  double h2d_fraction = 0.80;
  double d2h_fraction = 0.80;
  double bidirectional_fraction = 0.70;
  double d2d_fraction = 0.75;
  double gemm_fraction = 0.65;
  double warn_margin = 0.03;

  bool operator==(const check_thresholds&) const = default;
};
GPU_BASICS_JSON(check_thresholds, h2d_fraction, d2h_fraction, bidirectional_fraction, d2d_fraction,
                gemm_fraction, warn_margin)

/// The thresholds of a configuration.
[[nodiscard]] check_thresholds thresholds_of(const config& cfg);

/// NVML's health readings. A status is metric_status's text ("ok", "not supported", ...) or
/// "not measured" (a run that did not read it, e.g. an `all` run).
struct check_health {
  std::string ecc_status = "not measured";
  std::optional<std::uint64_t> ecc_uncorrected_volatile;   // since the driver loaded
  std::optional<std::uint64_t> ecc_uncorrected_aggregate;  // over the GPU's life
  std::string retired_status = "not measured";
  std::optional<unsigned> retired_pages;
  std::optional<bool> retired_pending;
  std::string remap_status = "not measured";
  std::optional<unsigned> remapped_correctable;
  std::optional<unsigned> remapped_uncorrectable;
  std::optional<bool> remap_pending;
  std::optional<bool> remap_failure;
  std::string throttle_status = "not measured";
  std::optional<std::uint64_t> idle_clock_event_reasons;  // bitmask, read before any work

  bool operator==(const check_health&) const = default;
};
GPU_BASICS_JSON(check_health, ecc_status, ecc_uncorrected_volatile, ecc_uncorrected_aggregate,
                retired_status, retired_pages, retired_pending, remap_status, remapped_correctable,
                remapped_uncorrectable, remap_pending, remap_failure, throttle_status,
                idle_clock_event_reasons)

/// One verdict: the check, PASS / WARN / FAIL / SKIP, what was measured, against what, and what
/// to do about it.
struct check_item {
  std::string id;                  // "pcie_link", "h2d", "d2h", "bidirectional", "d2d", "gemm", ...
  std::string name;                // "PCIe link"
  std::string status;              // "PASS", "WARN", "FAIL", "SKIP"
  std::string value;               // "Gen5 x16", "55.4 GB/s (87.9% of 63.0 GB/s)"
  std::string threshold;           // "Gen5 x16 (the maximum)", ">= 80% of the link"
  std::string hint;                // one line; empty on PASS
  std::optional<double> measured;  // the number judged (a fraction, a count)
  std::optional<double> limit;     // the number it was judged against

  bool operator==(const check_item&) const = default;
};
GPU_BASICS_JSON(check_item, id, name, status, value, threshold, hint, measured, limit)

/// What a check measured, with the ceilings it was judged against and its verdicts.
struct check_result {
  std::string gpu;  // device name
  std::optional<std::string> driver_version;
  std::string nvml_status = "ok";
  std::optional<unsigned> link_generation;  // best seen during the copies (it drops at idle)
  std::optional<unsigned> link_width;
  std::optional<unsigned> link_generation_max;
  std::optional<unsigned> link_width_max;
  std::optional<double> link_bytes_per_s;  // theoretical per direction, max generation and width
  std::optional<double> hbm_bytes_per_s;   // datasheet
  std::optional<double> bf16_peak_flops_per_s;
  std::optional<copy_figure> h2d;  // pinned
  std::optional<copy_figure> d2h;  // pinned
  std::optional<copy_figure> bidirectional;
  std::optional<copy_figure> d2d;
  std::optional<matmul_run> gemm;                  // bf16
  std::vector<std::string> verification_failures;  // what did not verify, one line each
  check_health health;
  check_thresholds thresholds;
  std::vector<check_item> items;  // evaluate_check at measure time
  std::optional<double> elapsed_s;

  bool operator==(const check_result&) const = default;
};
GPU_BASICS_JSON(check_result, gpu, driver_version, nvml_status, link_generation, link_width,
                link_generation_max, link_width_max, link_bytes_per_s, hbm_bytes_per_s,
                bf16_peak_flops_per_s, h2d, d2h, bidirectional, d2d, gemm, verification_failures,
                health, thresholds, items, elapsed_s)

/// A check_result with what `facts` say of the GPU: its name, driver and NVML status, its link
/// as saved (current and maximum) and the ceilings (link rate, datasheet HBM and bf16 peak).
/// Nothing measured, default thresholds, no verdicts. Pure.
[[nodiscard]] check_result check_result_of(const device_facts& facts);

/// The verdicts of `r` against r.thresholds, in a fixed order: link, H2D, D2H, bidirectional,
/// D2D, GEMM, verification, ECC, retired pages, remapped rows, idle throttling, NVML. Pure.
[[nodiscard]] std::vector<check_item> evaluate_check(const check_result& r);

/// "FAIL" when an item failed, else "WARN" when one warned, else "PASS".
[[nodiscard]] std::string overall_status(const std::vector<check_item>& items);

/// The footer's SKIP line, from the rows: the skipped checks grouped by the reason each row's hint
/// gives ("SKIP is not a failure; here: retired pages, row remapping (this run did not read it)."),
/// empty when none is skipped. Every SKIP row carries its reason, so the footer never says what
/// the rows do not.
[[nodiscard]] std::string skip_summary(const std::vector<check_item>& items);

/// NVML clock-event reasons that mean trouble on an idle GPU, and those that only warn; the rest
/// (GPU idle, application clocks, sync boost, display clock) are expected.
inline constexpr std::uint64_t kThrottleFailMask = 0x8 | 0x40 | 0x80;  // HW slowdown, HW thermal,
                                                                       // HW power brake
inline constexpr std::uint64_t kThrottleWarnMask = 0x4 | 0x20;         // SW power cap, SW thermal
/// The names of the reasons set in `mask` ("HW slowdown, SW thermal").
[[nodiscard]] std::string throttle_reason_names(std::uint64_t mask);

/// The overall verdict, the time taken, where the thresholds come from, why checks were skipped.
[[nodiscard]] std::vector<note> explain_check(const check_result& r, const device_facts& facts);
/// "check": one row per item.
[[nodiscard]] std::vector<presentation::table> present_check(const check_result& r);

/// The registry's entry (not part of `all`).
[[nodiscard]] lesson check_lesson();

}  // namespace gpu_basics::lessons

// The fleet view: one saved run per node (a check or an `all` run), a table of node x key figure,
// outliers marked by a robust rule, and a verdict per node. Host-only.
//
// The rule (docs/verdicts.md, "The fleet"): for each figure, over the nodes that have it, the
// median m and the median absolute deviation MAD; a node's score is (m - x) / s with
// s = max(1.4826 MAD, kFleetNoiseFloor m). A node is an outlier when its score exceeds
// kFleetOutlierScore: only the slow side is flagged (every key figure is higher-is-better). 1.4826
// MAD estimates the standard deviation of normal data; the floor keeps a fleet of near-identical
// nodes (MAD ~ 0) from flagging run-to-run noise. As in `compare`, only gates are judged: a
// figure saved without its samples is shown, informational, and left out of the medians.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/results.hpp"
#include "gpu_basics/lessons/check.hpp"

namespace gpu_basics::verdict {

inline constexpr double kFleetOutlierScore = 3.5;
inline constexpr double kFleetNoiseFloor = 0.01;  // of the median
inline constexpr double kMadToSigma = 1.4826;

/// One node: its name (the file's stem) and its check figures (check_of).
struct fleet_node {
  std::string name;
  lessons::check_result check;
};

struct fleet_cell {
  std::optional<double> value;  // in the figure's unit (GB/s, TFLOP/s)
  std::optional<double> score;  // robust score, higher = slower than the fleet; gates only
  bool outlier = false;
  bool gate = false;  // backed by samples (compare.hpp's class_of); informational otherwise
};

struct fleet_row {
  std::string node;
  std::string gpu;
  std::string link;               // "Gen5 x16" or "n/a"
  std::string check_status;       // overall_status of the node's check
  std::vector<fleet_cell> cells;  // one per fleet_result::figures
  std::string verdict;            // "ok", "warn", "degraded"
  std::string why;                // outliers and failed checks, one line
};

struct fleet_result {
  std::vector<std::string> figures;  // "H2D GB/s", ...
  std::vector<std::optional<double>> medians;
  std::vector<std::optional<double>> mads;
  std::vector<fleet_row> rows;  // the nodes' order

  [[nodiscard]] std::size_t degraded() const;
};

/// Median and MAD of `v` (nullopt for an empty list).
[[nodiscard]] std::optional<std::pair<double, double>> median_mad(std::vector<double> v);

/// The fleet table. A node is degraded when a figure is an outlier or a check FAILs, warn when
/// a check WARNs, else ok.
/// @throws format_error for an empty fleet.
[[nodiscard]] fleet_result analyze_fleet(const std::vector<fleet_node>& nodes);

/// The table "fleet": node, GPU, link, each figure (outliers marked "!"), check, verdict, why.
[[nodiscard]] presentation::table fleet_table(const fleet_result& f);

/// {"figures", "medians", "mads", "nodes": [{"node", "gpu", "link", "check", "values", "scores",
/// "outliers", "gates", "verdict", "why"}]}.
[[nodiscard]] nlohmann::json to_json(const fleet_result& f);

}  // namespace gpu_basics::verdict

#include "gpu_basics/verdict/node.hpp"

#include <algorithm>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/transfer.hpp"

namespace gpu_basics::verdict {

using lessons::check_result;
using lessons::copy_figure;

namespace {

/// The record's file, for messages.
std::string source_of(const lessons::run_record& r) {
  return r.source.empty() ? "results" : r.source;
}

const nlohmann::json* result_named(const lessons::run_record& r, const std::string& name) {
  for (const auto& [n, j] : r.results)
    if (n == name) return &j;
  return nullptr;
}

/// The members of a transfer result that a check reads, and only those: the rest (the sweep,
/// double-buffering, between GPUs: most of an `all` run's bytes) is left unread, so that a fleet
/// of hundreds of runs is judged in seconds.
struct transfer_figures {
  std::vector<lessons::shape_copies> shapes;
  std::vector<copy_figure> d2d;
  std::optional<lessons::streams_figures> streams;
  std::optional<double> link_bytes_per_s;
  std::optional<double> hbm_bytes_per_s;
};
void from_json(const nlohmann::json& j, transfer_figures& t) {
  require_json_object(j);
  read_member(j, "shapes", t.shapes);
  read_member(j, "d2d", t.d2d);
  read_member(j, "streams", t.streams);
  read_member(j, "link_bytes_per_s", t.link_bytes_per_s);
  read_member(j, "hbm_bytes_per_s", t.hbm_bytes_per_s);
}

/// Likewise of a profile result: its matmuls.
struct profile_figures {
  lessons::matmul_result matmul;
};
void from_json(const nlohmann::json& j, profile_figures& p) {
  require_json_object(j);
  read_member(j, "matmul", p.matmul);
}

/// Of copies, the one matching `pick` with the most bytes.
template <class Pick>
std::optional<copy_figure> largest(const std::vector<copy_figure>& copies, Pick pick) {
  std::optional<copy_figure> best;
  for (const auto& c : copies)
    if (pick(c) && (!best || c.bytes > best->bytes)) best = c;
  return best;
}

void read_transfer(const transfer_figures& t, check_result& c) {
  std::vector<copy_figure> copies;
  for (const auto& s : t.shapes) copies.insert(copies.end(), s.copies.begin(), s.copies.end());
  const auto pinned = [](const char* dir) {
    return [dir](const copy_figure& f) { return f.direction == dir && f.memory == "pinned"; };
  };
  c.h2d = largest(copies, pinned("H2D"));
  c.d2h = largest(copies, pinned("D2H"));
  if (t.streams) c.bidirectional = t.streams->bidirectional;
  c.d2d = largest(t.d2d, [](const copy_figure&) { return true; });
  if (t.link_bytes_per_s) c.link_bytes_per_s = t.link_bytes_per_s;
  if (t.hbm_bytes_per_s) c.hbm_bytes_per_s = t.hbm_bytes_per_s;
}

void read_profile(const profile_figures& p, check_result& c) {
  for (const auto& run : p.matmul.runs)
    if (run.precision == "bf16" &&
        (!c.gemm || run.m * run.n * run.k > c.gemm->m * c.gemm->n * c.gemm->k))
      c.gemm = run;
  if (c.gemm && c.gemm->peak_flops_per_s) c.bf16_peak_flops_per_s = c.gemm->peak_flops_per_s;
}

check_result check_of_record(const lessons::run_record& r, const lessons::check_thresholds& t) {
  check_result c;
  if (const auto* j = result_named(r, "check")) {
    c = lessons::result_from_json<check_result>(*j, "check");
  } else {
    const auto* tj = result_named(r, "transfer");
    const auto* pj = result_named(r, "profile");
    if (!tj && !pj)
      throw format_error(source_of(r) + ": a '" + r.command +
                         "' run holds no figure a check reads (it needs a check, all, transfer or "
                         "profile run)");
    c = lessons::check_result_of(lessons::facts_of(r));
    if (tj) read_transfer(lessons::result_from_json<transfer_figures>(*tj, "transfer"), c);
    if (pj) read_profile(lessons::result_from_json<profile_figures>(*pj, "profile"), c);
    for (const auto& [lesson, why] : r.errors)
      if (why.find("verification failed") != std::string::npos)
        c.verification_failures.push_back(lesson + ": " + why);
  }
  c.thresholds = t;
  c.items = lessons::evaluate_check(c);
  return c;
}

}  // namespace

check_result check_of(const lessons::run_record& r, const lessons::check_thresholds& t) {
  try {
    return check_of_record(r, t);
  } catch (const json_path_error& e) {  // the path from the results on: the file is added
    throw format_error(source_of(r) + ": " + e.what());
  }
}

}  // namespace gpu_basics::verdict
